#include "pjrt/timeline.h"

#include <algorithm>
#include <chrono>

namespace torch_pjrt::pjrt {

int64_t Timeline::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Timeline::record(int device, int64_t launched_ns, int64_t done_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t start = launched_ns;
  auto last = last_done_ns_.find(device);
  if (last == last_done_ns_.end()) {
    last_done_ns_.emplace(device, done_ns);
  } else {
    if (launched_ns > last->second) totals_.idle_ns += launched_ns - last->second;
    start = std::max(launched_ns, last->second);
    last->second = std::max(last->second, done_ns);
  }
  totals_.busy_ns += std::max<int64_t>(0, done_ns - start);
  totals_.programs += 1;
}

Timeline::Totals Timeline::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

void Timeline::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_done_ns_.clear();
  totals_ = Totals{};
}

}  // namespace torch_pjrt::pjrt
