// A PJRT_Event with one owner. Transfers and executions complete
// asynchronously; an Event is how a caller waits for them or learns they
// failed.
#pragma once

#include <chrono>
#include <functional>
#include <optional>

#include "pjrt/c_api.h"
#include "pjrt/error.h"

namespace torch_pjrt::pjrt {

// How long a host sync polls before it blocks (Event::await_polling).
inline constexpr std::chrono::microseconds kHostSyncPoll{200};

class Event {
 public:
  Event() = default;
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  bool valid() const { return event_ != nullptr; }
  // Blocks until the event completes; throws the Error it completed with.
  // `what` names the operation in that error (e.g. "host-to-device copy").
  void await(const char* what = "PJRT_Event_Await") const;
  // Like await, for a thread that wants the result as soon as it exists (a
  // host sync: `.cpu()`, `.item()`, `synchronize()`): polls the event for up
  // to `poll`, offering its core to other threads between polls, and only
  // then blocks. A blocked thread is woken by the plugin's completing thread,
  // which costs tens of microseconds on a loaded or virtual machine; a short
  // program finishes well inside the poll.
  void await_polling(const char* what, std::chrono::microseconds poll) const;
  bool is_ready() const;
  // Runs `callback` once the event completes, on a plugin thread (or right
  // away if it already has), with the error it completed with, if any.
  // The callback must not throw.
  void on_ready(std::function<void(std::optional<Error>)> callback) const;

 private:
  void reset() noexcept;
  const PJRT_Api* api_ = nullptr;
  PJRT_Event* event_ = nullptr;
};

}  // namespace torch_pjrt::pjrt
