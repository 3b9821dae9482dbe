#include "backend/runtime_state.h"

#include <c10/util/Exception.h>

#include <memory>
#include <mutex>

namespace torch_pjrt::backend {
namespace {
std::mutex init_mutex;
// Intentionally never destroyed: device buffers held by tensors that outlive
// interpreter shutdown must still find their client.
pjrt::Runtime* the_runtime = nullptr;
std::string init_error;
}  // namespace

void set_init_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(init_mutex);
  init_error = message;
}

void init_runtime(const pjrt::RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(init_mutex);
  if (the_runtime != nullptr) return;
  the_runtime = new pjrt::Runtime(options);
}

bool runtime_initialized() { return the_runtime != nullptr; }

pjrt::Runtime& runtime() {
  TORCH_CHECK(the_runtime != nullptr, "torch_pjrt: the PJRT runtime is not available: ",
              init_error.empty() ? "import torch_pjrt first" : init_error);
  return *the_runtime;
}

}  // namespace torch_pjrt::backend
