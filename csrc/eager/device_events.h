// The completion events of work launched on each device, kept so that
// torch.tpu.synchronize() can wait for all of it. Executions (single-op and
// fused) and uploads add theirs here.
#pragma once

#include "pjrt/event.h"

namespace torch_pjrt::backend {

// Adds work synchronize() must wait for.
void track(int device, pjrt::Event event);

// Waits for every event tracked so far on `device` (-1: all devices).
void wait_for_events(int device, const char* what);

}  // namespace torch_pjrt::backend
