// Where the ranks of one group meet when they all live in this process
// (ranks as threads, one device each, one PJRT client). Each collective is a
// meeting: every rank arrives with what it calls and what it brings; the
// last to arrive checks that all agree, runs the collective once for all of
// them, and hands each rank its results. A rank that does not arrive within
// the timeout, or calls something else, makes every participant raise; no
// device work is launched unless all agreed, so nothing is left waiting
// inside the plugin. No torch here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pjrt/buffer.h"

namespace torch_pjrt::distributed {

using BufferPtr = std::shared_ptr<pjrt::Buffer>;

// Raised by a meeting: the message says which call, which ranks and why.
class MeetingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Rendezvous {
 public:
  // What one participant brings to a meeting.
  struct Arrival {
    std::vector<int64_t> signature;  // must be equal for all
    std::string description;         // for errors: "all_reduce(sum) of float32[4]"
    std::vector<int64_t> info;       // free per-rank numbers (split sizes)
    std::vector<BufferPtr> buffers;
    int device = -1;  // the rank's device index
  };
  using Results = std::vector<std::vector<BufferPtr>>;
  // Runs once, on the last arriver, with every arrival in participant order.
  using Action = std::function<Results(const std::vector<Arrival>&)>;

  // The meeting point for `key`, shared by everyone in the process who asks
  // for the same key (the ranks of one group); created on first use.
  static std::shared_ptr<Rendezvous> shared(const std::string& key, int size);

  explicit Rendezvous(int size) : size_(size) {}
  int size() const { return size_; }

  // Blocks until `participants` have arrived at meeting `key` (or the
  // timeout), then returns this participant's results and everyone's
  // arrivals. Throws MeetingError on disagreement, timeout, or an error of
  // the action.
  struct Outcome {
    std::vector<BufferPtr> results;
    std::vector<Arrival> arrivals;
  };
  Outcome meet(const std::string& key, int participants, int index, Arrival mine,
               std::chrono::milliseconds timeout, const Action& action);

  // Point to point: `post` leaves buffers for the matching `take`, which
  // waits for them up to the timeout.
  void post(const std::string& key, Arrival mine);
  Arrival take(const std::string& key, std::chrono::milliseconds timeout,
               const std::string& what);

 private:
  struct Meeting {
    std::vector<std::optional<Arrival>> arrivals;
    int arrived = 0;
    int departed = 0;
    bool done = false;
    std::string error;
    Results results;
  };
  void finish_meeting(const std::string& key, Meeting& m, const Action& action);

  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, Meeting> meetings_;
  std::map<std::string, Arrival> posted_;
};

}  // namespace torch_pjrt::distributed
