// Ops without a lowering run on the CPU: arguments copied to the host, the
// CPU kernel run, results (and in-place/out= arguments) copied back. Every
// use is counted per op; TORCH_PJRT_FALLBACK decides whether it also warns
// (once per op) or raises.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_pjrt::backend {

// Runs `op` on the CPU as the backend fallback does (counted, warned or
// refused per TORCH_PJRT_FALLBACK).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

std::vector<std::pair<std::string, int64_t>> fallback_counts();
void reset_fallback_counts();

}  // namespace torch_pjrt::backend
