#include "eager/device_events.h"

#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace torch_pjrt::backend {
namespace {

std::mutex mutex;
std::map<int, std::deque<pjrt::Event>> pending;

}  // namespace

void track(int device, pjrt::Event event) {
  std::lock_guard<std::mutex> lock(mutex);
  auto& events = pending[device];
  events.push_back(std::move(event));
  // Completed events are dropped so the list stays short in long runs.
  if (events.size() > 64) {
    while (!events.empty() && events.front().is_ready()) events.pop_front();
  }
}

void wait_for_events(int device, const char* what) {
  std::vector<pjrt::Event> events;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [d, list] : pending) {
      if (device >= 0 && d != device) continue;
      for (auto& e : list) events.push_back(std::move(e));
      list.clear();
    }
  }
  for (auto& e : events) e.await_polling(what, pjrt::kHostSyncPoll);
}

}  // namespace torch_pjrt::backend
