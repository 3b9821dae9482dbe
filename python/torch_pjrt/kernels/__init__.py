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


def prepare_package_kernels() -> None:
    """The package's kernel ops, registered at import (see
    `_custom_op.registered`)."""
    from . import flash_attention, grouped_matmul, moe_experts, rms_norm
    from ._custom_op import prepare

    prepare([flash_attention._op, grouped_matmul._op, lambda: moe_experts._op(False),
             lambda: moe_experts._op(True), lambda: rms_norm._op("xla"),
             lambda: rms_norm._op("pallas")])
