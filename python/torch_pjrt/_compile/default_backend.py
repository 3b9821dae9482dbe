"""`torch.compile()` with no backend named, on tpu tensors.

`torch.compile(model)` means inductor, and torch 2.13's inductor picks its
Pallas code generator for a device named "tpu": it writes JAX kernels and
needs jax plus a real TPU to run them, so on this backend it fails
(`No module named 'jax'`, or Mosaic refusing the CPU plugin). Users and
libraries (Transformers' compiled generation, its tests) call the default
all the time.

With `TORCH_PJRT_INDUCTOR=tpu` (the default), a graph that Dynamo hands to
inductor and that holds a tensor of this device goes to the tpu backend
instead: the same lowering table, one XLA program per graph. Graphs with no
tpu tensor go to inductor unchanged, as do all graphs with
`TORCH_PJRT_INDUCTOR=inductor`. Inductor options (`mode=`, `options=`) have
no meaning for XLA programs and are ignored for routed graphs; the counter
`graphs_routed_from_inductor` (in `metrics()` as
`compile_graphs_routed_from_inductor`) counts them. AOTInductor
(`options={"use_aoti": True}`) asks for a deployable package, which the
tpu backend does not make: it is left to inductor.

Both entries Dynamo uses for inductor are wrapped: the object
`torch.compile` builds for backend "inductor" (its `__call__`) and the
registered "inductor" backend function.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.fx

from .._settings import settings
from .._import_hooks import when_imported
from .capture import _is_device_value
from .records import _counters, _lock


def _is_device_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and _is_device_value(value)


def holds_device_tensors(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether the graph reads or makes a tensor of this backend's device:
    an input, or a value Dynamo recorded while tracing (a factory call with
    `device="tpu"` in a graph with no tensor inputs)."""
    if any(_is_device_tensor(x) for x in example_inputs):
        return True
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(_is_device_tensor(v) for v in values):
            return True
    return False


def _should_route(gm: torch.fx.GraphModule, example_inputs) -> bool:
    return settings().inductor == "tpu" and holds_device_tensors(gm, example_inputs)


def _to_tpu(gm: torch.fx.GraphModule, example_inputs):
    from .backend import tpu_backend

    with _lock:
        _counters["graphs_routed_from_inductor"] += 1
    return tpu_backend(gm, example_inputs)


def _routed_wrapper_call(original: Callable) -> Callable:
    def __call__(self, model_, inputs_, **kwargs):
        aoti = isinstance(self, torch._TorchCompileAOTInductorWrapper)
        if not aoti and _should_route(model_, inputs_):
            return _to_tpu(model_, inputs_)
        return original(self, model_, inputs_, **kwargs)

    __call__.__torch_pjrt_routed__ = True  # type: ignore[attr-defined]
    return __call__


def _routed_backend(original: Callable) -> Callable:
    @functools.wraps(original)
    def inductor(gm, example_inputs, **kwargs):
        if _should_route(gm, example_inputs):
            return _to_tpu(gm, example_inputs)
        return original(gm, example_inputs, **kwargs)

    inductor.__torch_pjrt_routed__ = True  # type: ignore[attr-defined]
    return inductor


def _wrap_registered(module) -> None:
    from torch._dynamo.backends import registry

    entry = registry._COMPILER_FNS.get("inductor")
    if entry is not None and not getattr(entry, "__torch_pjrt_routed__", False):
        registry._COMPILER_FNS["inductor"] = _routed_backend(entry)


def install() -> None:
    """Wraps inductor's two entry points: the torch.compile wrapper class now,
    the registered backend when Dynamo's backends are imported (importing
    them here would add a second to `import torch_pjrt`)."""
    wrapper = torch._TorchCompileInductorWrapper
    if not getattr(wrapper.__call__, "__torch_pjrt_routed__", False):
        wrapper.__call__ = _routed_wrapper_call(wrapper.__call__)
    when_imported("torch._dynamo.backends.inductor", _wrap_registered)
