// Kernels brought in from elsewhere (JAX functions, StableHLO modules) as
// operators of their own: each is a torch.library op whose lowering calls
// the kernel's StableHLO as a function (hlo::Builder::call). Strict eager
// runs it as a program of one call, fused eager and torch.compile inline
// the call into their programs, through the same lowering table as aten.
#pragma once

#include <torch/extension.h>

namespace torch_pjrt::kernels {

// _C._register_kernel_op(name, lower, static_args) and friends.
void bind_kernel_ops(pybind11::module& m);

}  // namespace torch_pjrt::kernels
