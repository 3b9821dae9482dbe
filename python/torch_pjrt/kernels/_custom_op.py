"""One kernel, one real torch.library operator.

`define_kernel_op` defines `ns::name` from a schema and gives it:
  - a fake (meta) implementation, so torch.compile and FakeTensor know
    its output types without running it;
  - the tpu kernel: the C++ lowering table gets an entry for the op that
    asks `lower` for the kernel's StableHLO at the call's types (once per
    types: the program cache keeps what it built) and calls it. Strict
    eager runs that program; fused eager and torch.compile put the call
    inside their own programs;
  - optionally a CPU implementation and an autograd formula.
Nothing here knows where the StableHLO came from (JAX or a user's text).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from .. import _C
from ._module_text import KernelModule
from ._types import parse_mlir_type

__all__ = ["KernelOp", "define_kernel_op", "kernel_symbol_prefix", "check_custom_calls", "platform",
           "prepare", "registered"]

_libraries: dict[str, torch.library.Library] = {}
_lowerers: list = []

# Custom calls XLA itself expands on every platform. Anything else is a
# call into code a particular runtime registers (LAPACK through jaxlib,
# Mosaic on TPU, Python callbacks), which a PJRT plugin may not hold.
_PORTABLE_CUSTOM_CALLS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                          "annotate_device_placement", "MoveToHost", "MoveToDevice",
                          "mhlo.topk", "TopK", "LayoutConstraint"}
_PLATFORM_CUSTOM_CALLS = {"tpu": {"tpu_custom_call"}}


_platform: Optional[str] = None


def platform() -> str:
    """The plugin's platform as JAX names it: cpu, tpu, cuda, rocm (read
    once: a global torch.compile can trace)."""
    global _platform
    if _platform is None:
        _platform = _read_platform()
    return _platform


@torch._disable_dynamo  # imports Dynamo at the first call, not at import (about 1 s)
def _read_platform() -> str:
    from .. import runtime
    name = str(runtime.info().get("platform_name", "")).lower()
    return {"gpu": "cuda"}.get(name, name)


def check_custom_calls(op: str, calls: Sequence[str]) -> None:
    """Refuses a kernel holding a custom call the current plugin cannot run,
    naming the call and the plugin."""
    platform_name = platform()
    allowed = _PORTABLE_CUSTOM_CALLS | _PLATFORM_CUSTOM_CALLS.get(platform_name, set())
    bad = [c for c in calls if c not in allowed]
    if bad:
        from .. import runtime
        plugin = runtime.info().get("plugin_name", platform_name)
        hint = ""
        if any(c == "tpu_custom_call" for c in bad):
            hint = (" (a Pallas/Mosaic kernel compiled for TPU: off TPU, lower it with "
                    "interpret=True)")
        elif any(c.startswith("lapack_") or "lapack" in c for c in bad):
            hint = " (a LAPACK routine jaxlib provides to its own CPU client, not to PJRT plugins)"
        elif any("callback" in c for c in bad):
            hint = " (a Python callback, which a compiled program cannot call)"
        raise RuntimeError(
            f"{op}: the kernel's StableHLO holds custom call(s) {', '.join(repr(c) for c in bad)} "
            f"that the '{plugin}' PJRT plugin (platform '{platform_name}') cannot run{hint}")


def kernel_symbol_prefix(qualname: str, text: str) -> str:
    """A symbol prefix unique to the op and the kernel's text: equal text
    gives equal symbols, so a program holding the kernel twice defines it once."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", qualname)
    digest = hashlib.sha1((qualname + "\n" + text).encode()).hexdigest()[:12]
    return f"k_{ident}_{digest}"


@dataclass
class KernelOp:
    """What define_kernel_op made: `op` is the OpOverload to call."""
    qualname: str
    op: Any
    schema: torch._C.FunctionSchema


def _library(ns: str) -> torch.library.Library:
    lib = _libraries.get(ns)
    if lib is None:
        lib = _libraries[ns] = torch.library.Library(ns, "FRAGMENT")
    return lib


_registered: dict = {}


def registered(key: Any, make: Callable[[], Any]) -> Any:
    """The op made by `make()` for `key`, made on first use. A plain dict
    lookup, so torch.compile traces through it to the op once it exists
    (Dynamo traces through an lru_cache wrapper, into the registration).
    The package's own kernels are made when torch_pjrt is imported
    (`prepare`): one made while Dynamo traces its caller breaks the graph,
    and Dynamo then skips the frames around it (a decoder's layer loop) for
    the rest of the process."""
    op = _registered.get(key)
    if op is None:
        op = _registered[key] = _make_eagerly(make) if torch.compiler.is_compiling() else make()
    return op


def prepare(ops: Sequence[Callable[[], Any]]) -> None:
    """Registers kernel ops ahead of use by calling each of `ops` (a
    kernel module's `_op`), when jax is installed: a registration imports
    nothing and takes about a millisecond; jax is imported at a kernel's
    first lowering."""
    from .from_jax import jax_available
    if jax_available():
        for op in ops:
            op()


@torch._disable_dynamo  # imports Dynamo at the first call, not at import (about 1 s)
def _make_eagerly(make: Callable[[], Any]) -> Any:
    return make()


def _graph_ops_changed() -> None:
    from .._compile import capture
    capture._graph_ops_cache = None


# lower(args) gets one entry per schema argument: (dtype, shape) for a
# tensor, the value for anything else; it returns a KernelModule.
LowerFn = Callable[[list], KernelModule]


def define_kernel_op(qualname: str, schema: str, lower: LowerFn,
                     fake: Callable[..., Any],
                     cpu: Optional[Callable[..., Any]] = None) -> KernelOp:
    if "::" not in qualname:
        raise ValueError(f"kernel op name '{qualname}' must be 'namespace::name'")
    ns, name = qualname.split("::", 1)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ns) or \
            not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"kernel op name '{qualname}': namespace and name must be identifiers")
    if ns == "aten":
        raise ValueError("kernel ops cannot be defined in the aten namespace")
    lib = _library(ns)
    lib.define(name + schema)
    packet = getattr(getattr(torch.ops, ns), name)
    op = packet.default
    parsed = op._schema
    torch.library.register_fake(qualname, fake, lib=lib)
    if cpu is not None:
        lib.impl(name, cpu, "CPU")

    cache: dict[tuple, tuple] = {}

    def lower_entry(args: list) -> tuple:
        key = tuple((a[0], tuple(a[1])) if isinstance(a, tuple) else a for a in args)
        made = cache.get(key)
        if made is None:
            module = lower(list(args))  # refuses unrunnable custom calls itself
            results = [parse_mlir_type(r) for r in module.results]
            if len(results) != len(parsed.returns):
                raise RuntimeError(f"{qualname}: the kernel returns {len(results)} values, "
                                   f"the schema {len(parsed.returns)}")
            made = cache[key] = (module.symbol, module.text, [(d, s) for d, s in results])
        return made

    # Float arguments reach `lower` as values (they pick the kernel), not
    # as runtime parameters.
    static_scalars = [i for i, a in enumerate(parsed.arguments)
                      if str(a.type) in ("float", "Scalar", "float?", "Scalar?")]
    _lowerers.append(lower_entry)  # C++ borrows it: kept for the life of the process
    _C._register_kernel_op(qualname, lower_entry, static_scalars)
    _graph_ops_changed()
    return KernelOp(qualname, op, parsed)
