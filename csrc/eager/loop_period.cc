#include "eager/loop_period.h"

#include <algorithm>

namespace torch_pjrt::eager {

size_t loop_period(const std::vector<uint64_t>& s) {
  size_t n = s.size();
  for (size_t p = 1; 2 * p <= n; ++p) {
    size_t span = std::max(2 * p, n / 2);  // how far back the repetition must reach
    bool repeats = true;
    for (size_t i = n - span + p; i < n && repeats; ++i) repeats = s[i] == s[i - p];
    if (repeats) return p;
  }
  return 0;
}

}  // namespace torch_pjrt::eager
