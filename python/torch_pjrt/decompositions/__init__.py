"""Ops without a lowering of their own run on tpu through torch's
decompositions instead of falling back to the CPU.

`install()` (at import) registers, for every aten op that would otherwise
reach the CPU fallback and that torch can decompose (selection.py), a
PrivateUse1 kernel running the decomposition on the tpu tensors. In strict
eager the decomposition's ops are recorded as one fused graph and run as
one program when the kernel returns, so a decomposed op costs one launch
and caches like a lowered one; in fused eager they join the pending graph;
debug eager runs and waits for each of them. Autograd is unchanged: the
kernel sits below it, and the op's own derivative formula applies.

`decomposed_counts()` (op -> calls, also `metrics()["decomposed_ops"]`)
says which ran this way.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import torch

from .. import _C
from .selection import EXCLUDED, decomposable_ops

__all__ = ["EXCLUDED", "decomposed_counts", "decomposed_op_names", "install", "reset_counts"]

_library: torch.library.Library | None = None
_names: list[str] = []
_counts: Counter[str] = Counter()
_lock = threading.Lock()
_active = threading.local()
# Ops whose decomposition came back to the op itself (a reference built on
# a primitive that calls it): found on first use, run on the CPU after.
_loops_back: set[str] = set()


def _kernel(name: str, op: torch._ops.OpOverload, decomposition: Callable) -> Callable:
    schema_name, overload = op._schema.name, op._schema.overload_name
    tensor_slots = [
        isinstance(a.type, torch.TensorType) for a in op._schema.arguments if not a.kwarg_only
    ]

    def on_cpu(args, kwargs):
        # Numbers the dispatcher unwrapped from scalar tensors go back as
        # 0-d tensors, which promote the same way.
        args = [
            torch.scalar_tensor(a, dtype=torch.tensor(a).dtype)
            if i < len(tensor_slots) and tensor_slots[i] and isinstance(a, (bool, int, float))
            else a
            for i, a in enumerate(args)
        ]
        return _C._cpu_fallback(schema_name, overload, *args, **kwargs)

    def run(*args, **kwargs):
        running = getattr(_active, "ops", None)
        if running is None:
            running = _active.ops = set()
        if name in _loops_back:
            return on_cpu(args, kwargs)
        if name in running:
            with _lock:
                _loops_back.add(name)
                _counts[name] -= 1
                if _counts[name] <= 0:
                    del _counts[name]
            return on_cpu(args, kwargs)
        with _lock:
            _counts[name] += 1
        running.add(name)
        try:
            if _C._eager_mode() != "strict":
                result = decomposition(*args, **kwargs)
            else:
                # One program for the whole decomposition: record it as a
                # fused graph; back in strict, it runs before we return.
                _C._set_eager_mode("fused")
                try:
                    result = decomposition(*args, **kwargs)
                finally:
                    _C._set_eager_mode("strict")
        finally:
            running.discard(name)
        if result is NotImplemented:
            # The decomposition declines these arguments.
            with _lock:
                _counts[name] -= 1
            return on_cpu(args, kwargs)
        return result

    run.__name__ = f"decomposed_{name.replace('::', '_').replace('.', '_')}"
    return run


def install() -> None:
    """Registers the decomposition kernels (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    lowered = set(_C._lowered_ops())
    for name, op, decomposition in decomposable_ops(lowered):
        library.impl(op, _kernel(name, op, decomposition), "PrivateUse1")
        _names.append(name)
    _library = library


def decomposed_op_names() -> list[str]:
    """The aten ops (name.overload) that run through a decomposition."""
    return sorted(_names)


def decomposed_counts() -> dict[str, int]:
    """Calls run through a decomposition, by op (CPU runs not included)."""
    with _lock:
        return {name: n for name, n in _counts.items() if n > 0}


def reset_counts() -> None:
    with _lock:
        _counts.clear()
