#include "pjrt/event.h"

#include <memory>
#include <thread>
#include <utility>

namespace torch_pjrt::pjrt {

Event::Event(Event&& other) noexcept
    : api_(other.api_), event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() { reset(); }

void Event::reset() noexcept {
  if (event_ == nullptr) return;
  auto args = TORCH_PJRT_ARGS(PJRT_Event_Destroy_Args);
  args.event = event_;
  if (PJRT_Error* error = api_->PJRT_Event_Destroy(&args)) {
    take_error(api_, error, "PJRT_Event_Destroy");  // destroyed; nothing to report to
  }
  event_ = nullptr;
}

void Event::await(const char* what) const {
  if (event_ == nullptr) return;
  auto args = TORCH_PJRT_ARGS(PJRT_Event_Await_Args);
  args.event = event_;
  check(api_, api_->PJRT_Event_Await(&args), what);
}

void Event::await_polling(const char* what, std::chrono::microseconds poll) const {
  if (event_ == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() + poll;
  // yield, not a busy spin: on a machine with as many threads as cores the
  // plugin's worker that completes the event may need this core.
  while (!is_ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  await(what);  // ready: returns at once, with the error it completed with
}

bool Event::is_ready() const {
  if (event_ == nullptr) return true;
  auto args = TORCH_PJRT_ARGS(PJRT_Event_IsReady_Args);
  args.event = event_;
  check(api_, api_->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

namespace {
struct ReadyCallback {
  const PJRT_Api* api;
  std::function<void(std::optional<Error>)> fn;
};

void run_ready_callback(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<ReadyCallback> callback(static_cast<ReadyCallback*>(user_arg));
  std::optional<Error> failure;
  if (error != nullptr) failure = take_error(callback->api, error, "PJRT_Event_OnReady");
  callback->fn(std::move(failure));
}
}  // namespace

void Event::on_ready(std::function<void(std::optional<Error>)> callback) const {
  if (event_ == nullptr) {
    callback(std::nullopt);
    return;
  }
  auto holder = std::make_unique<ReadyCallback>(ReadyCallback{api_, std::move(callback)});
  auto args = TORCH_PJRT_ARGS(PJRT_Event_OnReady_Args);
  args.event = event_;
  args.callback = run_ready_callback;
  args.user_arg = holder.get();
  check(api_, api_->PJRT_Event_OnReady(&args), "PJRT_Event_OnReady");
  holder.release();  // now owned by the plugin until the callback runs
}

}  // namespace torch_pjrt::pjrt
