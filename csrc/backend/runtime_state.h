// The process's one PJRT runtime, created from the Python settings on first
// use. Every device operation goes through it.
#pragma once

#include <string>

#include "pjrt/runtime.h"

namespace torch_pjrt::backend {

// Creates the runtime; throws if one exists already with other options.
void init_runtime(const pjrt::RuntimeOptions& options);
bool runtime_initialized();
// Why initialisation failed at import (no plugin, a bad cache folder); shown
// by every later attempt to use the device.
void set_init_error(const std::string& message);
// Throws c10::Error when init_runtime has not run.
pjrt::Runtime& runtime();

}  // namespace torch_pjrt::backend
