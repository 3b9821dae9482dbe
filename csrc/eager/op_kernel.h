// The one kernel every lowered aten op runs through in strict and debug
// eager mode: key the call, find or build its program, run it, and hand
// the results back as tensors, writing them into `self` or `out=` tensors
// for in-place and out variants.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_pjrt::backend {

void run_lowered_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Registers run_lowered_op for PrivateUse1 on every op with a lowering.
void register_lowered_ops();

// True for a schema argument the op writes (self of an in-place op, out=).
inline bool is_write(const c10::Argument& a) {
  return a.alias_info() && a.alias_info()->isWrite();
}

}  // namespace torch_pjrt::backend
