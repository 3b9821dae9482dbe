"""Kernels from elsewhere as PyTorch operators on the tpu device.

- `jax_op(name, fn)`: a JAX function (Pallas kernels included);
- `stablehlo_op(name, module)`: StableHLO text or bytecode.

Each becomes a torch.library operator whose tpu kernel is the StableHLO,
run on the tensors' device buffers in eager mode and inlined into the
program under fused eager and torch.compile. jax is imported only by
`jax_op` (and by `stablehlo_op` for bytecode).
"""
from ._module_text import KernelModuleError
from .from_jax import JaxOp, jax_op
from .from_stablehlo import stablehlo_op

__all__ = ["jax_op", "JaxOp", "stablehlo_op", "KernelModuleError"]
