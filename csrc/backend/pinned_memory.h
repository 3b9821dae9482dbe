// Pinned host memory for the tpu device: what tensor.pin_memory() and
// DataLoader(pin_memory=True) allocate. PJRT plugins read host memory
// directly, so "pinned" here is a promise, as with CUDA: the caller leaves
// the memory unchanged until the device has read it, which lets
// .to("tpu", non_blocking=True) return before the copy is done.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_pjrt::backend {

// Page-aligned host allocations, remembered so is_pinned() can answer.
c10::Allocator* pinned_allocator();

// True when `ptr` lies inside memory pinned_allocator() handed out.
bool is_pinned_ptr(const void* ptr);

}  // namespace torch_pjrt::backend
