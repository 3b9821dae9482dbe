// Device time between programs. With the timeline on, each execution's
// launch time (on the host) and completion time (when its done event
// fires) give, per device, the time a device spent running programs and
// the gaps in which it waited for the host to launch the next one. Off by
// default: it costs a completion callback per execution.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace torch_pjrt::pjrt {

class Timeline {
 public:
  struct Totals {
    int64_t busy_ns = 0;  // programs running, summed over devices
    int64_t idle_ns = 0;  // a device finished one program before the next was launched
    int64_t programs = 0;
  };

  static int64_t now_ns();

  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // One execution on `device`: launched by the host at `launched_ns`,
  // complete at `done_ns`. A device runs its programs in launch order, so
  // one starts when it is launched or when the previous one is done,
  // whichever is later.
  void record(int device, int64_t launched_ns, int64_t done_ns);

  Totals totals() const;
  // Forgets the totals and each device's last completion, so the first
  // program after a reset opens no gap.
  void reset();

 private:
  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  std::unordered_map<int, int64_t> last_done_ns_;
  Totals totals_;
};

}  // namespace torch_pjrt::pjrt
