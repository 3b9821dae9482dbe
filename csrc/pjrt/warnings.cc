#include "pjrt/warnings.h"

#include <iostream>
#include <mutex>

namespace torch_pjrt::pjrt {
namespace {
std::mutex& handler_mutex() {
  static std::mutex mutex;
  return mutex;
}
WarningHandler& handler() {
  static auto* h = new WarningHandler();  // never destroyed: warnings may come at exit
  return *h;
}
}  // namespace

void set_warning_handler(WarningHandler h) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  handler() = std::move(h);
}

void warn(const std::string& message) {
  WarningHandler h;
  {
    std::lock_guard<std::mutex> lock(handler_mutex());
    h = handler();
  }
  if (h) {
    h(message);
  } else {
    std::cerr << "torch_pjrt warning: " << message << std::endl;
  }
}

}  // namespace torch_pjrt::pjrt
