"""Choosing the eager mode while the program runs.

    torch_pjrt.set_eager_mode("fused")
    with torch_pjrt.eager_mode("strict"):
        ...

strict runs each op as its own program at once; debug also waits for it, so
errors surface at the op; fused records ops into a pending graph per device
and runs it as one program when a value is needed (see
csrc/eager/pending_graph.h). Compiled graphs (torch.compile) join that
pending graph in strict mode too. The end of every optimizer step runs the
pending graph, so a training step is one program whether or not the loop
reads anything back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C
from ._import_hooks import when_imported
from ._settings import EAGER_MODES


def get_eager_mode() -> str:
    """The eager mode in force: "strict", "debug" or "fused"."""
    return _C._eager_mode()


def set_eager_mode(mode: str) -> None:
    """Switches the eager mode. Leaving fused mode first runs what is pending."""
    if mode not in EAGER_MODES:
        raise ValueError(f"eager mode {mode!r} is not one of {', '.join(EAGER_MODES)}")
    _C._set_eager_mode(mode)


@contextlib.contextmanager
def eager_mode(mode: str) -> Iterator[None]:
    """Runs the block in `mode`, then restores the mode it found."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


def flush_pending(device: int = -1) -> None:
    """Runs the pending fused graph of `device` (-1: all) without waiting for it."""
    _C._fused_flush("explicit", device)


def _after_optimizer_step(optimizer, args, kwargs) -> None:
    # Fused mode's recorded ops and strict mode's pending compiled graphs.
    _C._fused_flush("optimizer step", -1)


_hook = None


def _register(hook) -> None:
    global _hook
    if _hook is not None:
        _hook.remove()
    _hook = register_optimizer_step_post_hook(hook)


def install_optimizer_hook() -> None:
    """Cuts pending graphs at the end of each optimizer step (once per process).

    Inside a compiled step Dynamo would try to trace the hook and fall back
    with a warning about the C++ call; once Dynamo is loaded the hook is
    registered again behind `torch._dynamo.disable`, so it always runs as is."""
    if _hook is None:
        _register(_after_optimizer_step)
        when_imported("torch._dynamo", lambda dynamo: _register(dynamo.disable(_after_optimizer_step)))
