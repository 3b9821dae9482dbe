// The completion events of work launched on each device, kept so that
// torch.tpu.synchronize() can wait for all of it and a torch.Event can wait
// for the work launched before it was recorded. Executions (single-op and
// fused), uploads and asynchronous downloads add theirs here.
#pragma once

#include <cstdint>
#include <memory>

#include "pjrt/event.h"

namespace torch_pjrt::backend {

// Adds work synchronize() must wait for. `keep_alive` is held until the
// work is known complete (the buffer and host memory of an asynchronous
// download).
void track(int device, pjrt::Event event, std::shared_ptr<const void> keep_alive = nullptr);

// Waits for every event tracked so far on `device` (-1: all devices).
void wait_for_events(int device, const char* what);

// A mark after the work tracked so far on `device`: what a recorded
// torch.Event stands for.
uint64_t work_mark(int device);

// Whether the work tracked on `device` up to `mark` has completed.
bool work_done(int device, uint64_t mark);

// Waits for the work tracked on `device` up to `mark` (not for later work).
void wait_for_work(int device, uint64_t mark, const char* what);

}  // namespace torch_pjrt::backend
