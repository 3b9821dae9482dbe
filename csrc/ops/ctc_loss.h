// What the CTC loss lowering shares with the eager kernels that route int[]
// lengths to its Tensor-lengths form (csrc/backend/ctc_lengths.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace torch_pjrt::ops {

// The CPU's checks of int[] lengths, with its messages: log_probs is
// [T, N, C], targets padded [N, S] or concatenated [sum(target_lengths)].
void check_ctc_lengths(int64_t T, int64_t N, const std::vector<int64_t>& target_dims,
                       const std::vector<int64_t>& input_lengths, const std::vector<int64_t>& target_lengths);

}  // namespace torch_pjrt::ops
