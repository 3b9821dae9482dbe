// The period of a loop in a recorded op sequence, for cutting a loop's
// pending graphs at the same place in every iteration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torch_pjrt::eager {

// The smallest p such that the latest launches repeat with period p: the
// last max(2p, n/2) entries of `s` satisfy s[i] == s[i - p]. What came
// before the loop (its set-up) may differ. 0 when no such p exists.
size_t loop_period(const std::vector<uint64_t>& s);

}  // namespace torch_pjrt::eager
