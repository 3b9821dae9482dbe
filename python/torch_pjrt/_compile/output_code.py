"""A compiled graph that can be stored: what the backend hands AOTAutograd.

AOTAutograd caches a compiler's result only when the compiler returns an
`OutputCode` it can pickle. Storing it lets a new process skip AOTAutograd
(its cache, keyed by the graph) and, with Dynamo's caching precompile, skip
Dynamo's tracing as well (the whole frame is loaded back, guards included).

What is stored is the AOTAutograd graph itself, with its nodes' fake values
(the lowering reads shapes and dtypes from them): see graph_store.py.
Loading rebuilds the regions from the graph; programs are then lowered on
the first call as usual and XLA's executables come from the program cache
on disk, so nothing of this process's device state (buffers, executables)
is ever pickled.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import pickle
import uuid
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
from torch._inductor.output_code import OutputCode

from .graph_store import dump_graph, load_graph


# The backend call's token for each graph name this process gave, and the
# name this process gives each loaded token.
_entry_tokens: dict[str, str] = {}
_loaded_names: dict[str, str] = {}

# The name the backend gives the graph it is compiling (or loading) now.
current_graph: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "torch_pjrt_current_graph", default=None)


class TpuOutputCode(OutputCode):
    """One forward, backward or inference graph compiled for the device."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str, base: str,
                 build: Callable[[torch.fx.GraphModule, str, str], Callable]) -> None:
        super().__init__()
        # AOTAutograd calls it with one list of arguments. An instance
        # attribute, so the wrappers that copy a callable's __dict__
        # (functools.wraps in torch._dynamo.disable) keep it.
        self._boxed_call = True
        self._gm: Optional[torch.fx.GraphModule] = gm
        self._kind = kind
        self._base = base
        # One token per backend call, shared by its forward and backward, so
        # a process that loads both without a backend call names them alike.
        self._entry = _entry_tokens.setdefault(base, uuid.uuid4().hex)
        self._build = build
        self._fn: Optional[Callable] = build(gm, kind, base)
        self._pickled: Optional[bytes] = None

    def __call__(self, inputs: list) -> Any:
        if self._fn is None:
            raise RuntimeError(
                f"torch_pjrt: the stored {self._kind} graph {self._base} was called before it "
                "was loaded (post_compile)")
        out = self._fn(*inputs)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def prepare_for_serialization(self) -> None:
        # Called on a shallow copy: the live object keeps its graph and regions.
        self._pickle_graph()
        self._gm = None
        self._fn = None

    def _pickle_graph(self) -> None:
        if self._pickled is None and self._gm is not None:
            self._pickled = dump_graph(self._gm)

    def post_compile(self, example_inputs: Sequence[Any], constants: Any,
                     graph_kwargs: Any) -> None:
        if self._fn is not None:
            return
        try:
            self._load(example_inputs)
        except Exception as error:
            # AOTAutograd's lookup turns a failed load into a cache bypass
            # (the graph is traced again); Dynamo's precompile loading
            # expects a RuntimeError for the same.
            raise RuntimeError(
                f"torch_pjrt: the stored {self._kind} graph could not be loaded: "
                f"{type(error).__name__}: {error}") from error

    def _load(self, example_inputs: Sequence[Any]) -> None:
        if self._pickled is None:
            raise RuntimeError(f"torch_pjrt: stored graph {self._base} has no contents")
        from torch._guards import TracingContext, detect_fake_mode
        from torch._subclasses import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake_mode = detect_fake_mode(example_inputs)
        if fake_mode is None:
            context = TracingContext.try_get()
            fake_mode = context.fake_mode if context is not None else None
        if fake_mode is None:
            fake_mode = FakeTensorMode(shape_env=ShapeEnv())
        gm = load_graph(self._pickled, fake_mode)
        # Reports name the graph as this process numbers it: the backend's
        # call that found the entry, or a new number when Dynamo's own cache
        # installs it without calling the backend.
        base = current_graph.get()
        if base is None:
            from .records import _graph_ids

            base = _loaded_names.get(self._entry)
            if base is None:
                base = _loaded_names[self._entry] = f"graph{next(_graph_ids)}"
        self._base = base
        self._gm = gm
        self._fn = self._build(gm, self._kind, self._base)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass  # no Triton kernels: programs come from the program cache

    def __copy__(self) -> "TpuOutputCode":
        # AOTAutograd copies the result, then prepares the copy for storing.
        copied = object.__new__(TpuOutputCode)
        copied.__dict__.update(self.__dict__)
        return copied

    def __getstate__(self) -> dict:
        # Only the pickled graph travels: never regions, programs or buffers.
        # Called by pickle directly too (torch's aot_compile saving a
        # compiled function): a graph that is not stored is then a pickling
        # error, not AOTAutograd's bypass signal.
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        try:
            self._pickle_graph()
        except BypassAOTAutogradCache as error:
            raise pickle.PicklingError(str(error)) from error
        state = dict(self.__dict__)
        state["_gm"] = None
        state["_fn"] = None
        return state


def cache_identity() -> str:
    """What a stored AOTAutograd result depends on besides what torch puts in
    its key, as the compiler's `cache_key_tag`: this build of torch_pjrt (its
    Python files, which hold the decompositions, capture rules and the
    kernels registered for the device, and its C++ library, which holds the
    lowering table and the autocast policy) and the settings that choose
    what a traced op becomes (the SDPA kernel mode, whether JAX is there).
    So a changed torch_pjrt or setting misses instead of loading graphs made
    under another, and inductor's entries never meet ours."""
    global _build_identity
    if _build_identity is None:
        from .. import _C

        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        digest = hashlib.sha256(b"torch_pjrt")
        for root, dirs, files in os.walk(package):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    with open(path, "rb") as f:
                        digest.update(os.path.relpath(path, package).encode() + b"\0" + f.read())
        # The library is large; its size and modification time stand for it.
        info = os.stat(_C.__file__)
        digest.update(f"{info.st_size}:{info.st_mtime_ns}".encode())
        _build_identity = digest.hexdigest()[:16]
    from ..kernels import sdpa

    return f"torch_pjrt:{_build_identity}:sdpa={sdpa.get_mode()}:jax={int(sdpa.jax_available())}"


_build_identity: Optional[str] = None

