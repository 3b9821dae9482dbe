// The process's one PJRT runtime, created from the Python settings on first
// use. Every device operation goes through it.
#pragma once

#include "pjrt/runtime.h"

namespace torch_pjrt::backend {

// Creates the runtime; throws if one exists already with other options.
void init_runtime(const pjrt::RuntimeOptions& options);
bool runtime_initialized();
// Throws c10::Error when init_runtime has not run.
pjrt::Runtime& runtime();

}  // namespace torch_pjrt::backend
