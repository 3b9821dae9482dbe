#include "eager/device_events.h"

#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace torch_pjrt::backend {
namespace {

struct Tracked {
  uint64_t seq;
  std::shared_ptr<pjrt::Event> event;
  std::shared_ptr<const void> keep_alive;
};

struct DeviceWork {
  std::deque<Tracked> events;  // in the order tracked; completed ones leave
  uint64_t next_seq = 1;
};

std::mutex mutex;
std::map<int, DeviceWork> work;

// The events on `device` up to `mark` that may still be running.
std::vector<std::shared_ptr<pjrt::Event>> events_up_to(int device, uint64_t mark) {
  std::vector<std::shared_ptr<pjrt::Event>> out;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = work.find(device);
  if (it == work.end()) return out;
  for (const Tracked& t : it->second.events) {
    if (t.seq > mark) break;
    out.push_back(t.event);
  }
  return out;
}

}  // namespace

void track(int device, pjrt::Event event, std::shared_ptr<const void> keep_alive) {
  std::lock_guard<std::mutex> lock(mutex);
  DeviceWork& w = work[device];
  w.events.push_back(Tracked{w.next_seq++, std::make_shared<pjrt::Event>(std::move(event)),
                             std::move(keep_alive)});
  // Completed events are dropped so the list stays short in long runs.
  if (w.events.size() > 64) {
    while (!w.events.empty() && w.events.front().event->is_ready()) w.events.pop_front();
  }
}

void wait_for_events(int device, const char* what) {
  std::vector<Tracked> events;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [d, w] : work) {
      if (device >= 0 && d != device) continue;
      for (auto& t : w.events) events.push_back(std::move(t));
      w.events.clear();
    }
  }
  for (auto& t : events) t.event->await_polling(what, pjrt::kHostSyncPoll);
}

uint64_t work_mark(int device) {
  std::lock_guard<std::mutex> lock(mutex);
  return work[device].next_seq - 1;
}

bool work_done(int device, uint64_t mark) {
  for (const auto& e : events_up_to(device, mark)) {
    if (!e->is_ready()) return false;
  }
  return true;
}

void wait_for_work(int device, uint64_t mark, const char* what) {
  for (const auto& e : events_up_to(device, mark)) e->await_polling(what, pjrt::kHostSyncPoll);
}

}  // namespace torch_pjrt::backend
