"""Which aten ops run on tpu through one of torch's own decompositions.

An op qualifies when nothing else would run it on the device: it has no
lowering in the table (csrc/ops), no composite kernel that torch would use
for every backend, and a CPU kernel, so that without this it would go to
the CPU fallback. torch's decomposition table then gives a function of
other aten ops, most of which have lowerings; the decomposition runs on the
tpu tensors themselves.

Some decompositions are left out, each for a reason kept next to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

_COMPOSITE_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)

# Op name -> why torch's decomposition is not used for it on tpu.
EXCLUDED: dict[str, str] = {
    # Named for the CPU's own flash kernel; torch never calls it for tpu.
    "aten::_scaled_dot_product_flash_attention_for_cpu": "a CPU-only kernel's entry point",
}
# A reference that ends in a primitive whose eager kernel is the op itself
# would come back to the op; the ops that did (igamma, some Bessel
# functions) have lowerings now, and the kernel in __init__.py sends any
# such call to the CPU fallback at run time.


def _routes_to_fallback(name: str, lowered: set[str]) -> bool:
    if name in lowered:
        return False
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(name, "PrivateUse1"):
        return False
    if any(has(name, key) for key in _COMPOSITE_KEYS):
        return False
    return has(name, "CPU")


def decomposable_ops(
    lowered: set[str],
) -> Iterator[tuple[str, torch._ops.OpOverload, Callable]]:
    """(name, overload, decomposition) for each aten op that would otherwise
    fall back to the CPU and has a decomposition in torch's table (or,
    for ops torch has none for, in amp.py and kernel_only_ops.py)."""
    from torch._decomp import decomposition_table

    from .amp import DECOMPOSITIONS as amp
    from .kernel_only_ops import DECOMPOSITIONS as kernel_only

    for op, decomposition in [*decomposition_table.items(), *amp.items(), *kernel_only.items()]:
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        name = op.name()
        if name in EXCLUDED or not _routes_to_fallback(name, lowered):
            continue
        yield name, op, decomposition
