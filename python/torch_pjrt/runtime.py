"""The PJRT runtime underneath the device: plugin, devices, programs.

Most users never touch this module; it is what the `tpu` device is built on,
and it lets anyone run a StableHLO program directly:

    import torch, torch_pjrt.runtime as rt
    exe = rt.compile(mlir_text)
    out, = exe([rt.to_device(torch.ones(4)), rt.to_device(torch.ones(4))])
    out.to_tensor()
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator

import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C
from ._settings import settings
from .plugin_paths import PluginChoice, resolve

DeviceArray = _C.DeviceArray
Executable = _C.Executable
PjrtError = _C.PjrtError

_lock = threading.Lock()
_choice: PluginChoice | None = None


def _quiet_plugin_logs() -> None:
    # XLA logs INFO lines (device counts, flags) to stderr; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def ensure_initialized() -> None:
    """Loads the plugin TORCH_PJRT_PLUGIN selects and creates its client (once)."""
    global _choice
    if _C._runtime_initialized():
        return
    with _lock:
        if _C._runtime_initialized():
            return
        s = settings()
        choice = resolve(s.plugin)
        _quiet_plugin_logs()
        _C._init_runtime(str(choice.path), s.cpu_devices, s.cache_dir, s.eager, s.fallback,
                         s.dump_dir, s.fused_max_ops)
        _choice = choice


@dataclass(frozen=True)
class CompileResult:
    executable: Executable
    source: str  # "compiled", "memory" or "disk"
    seconds: float


def compile(mlir: str, *, portable: bool = True) -> Executable:
    """Compiles StableHLO MLIR text through the compile cache."""
    return compile_with_source(mlir, portable=portable).executable


def compile_with_source(mlir: str, *, portable: bool = True) -> CompileResult:
    """Like compile(), also saying where the executable came from and how long it took."""
    ensure_initialized()
    executable, source, seconds = _C._compile(mlir, portable)
    return CompileResult(executable, source, seconds)


def to_device(tensor: torch.Tensor, device: int = 0) -> DeviceArray:
    ensure_initialized()
    return DeviceArray.from_tensor(tensor, device)


def info() -> dict[str, Any]:
    """Plugin, platform and devices, as the plugin reports them."""
    ensure_initialized()
    result = _C._runtime_info()
    assert _choice is not None
    result["plugin_name"] = _choice.name
    result["plugin_reason"] = _choice.reason
    return result


@contextlib.contextmanager
def timeline() -> Iterator[None]:
    """Within the block, every execution's launch and completion are
    recorded: `metrics()["device_busy_seconds"]` is the time the devices
    spent running programs and `metrics()["device_idle_seconds"]` the gaps in
    which a device had finished one program and waited for the host to
    launch the next (the time between programs). Off outside: it costs a
    completion callback per execution."""
    ensure_initialized()
    _C._set_timeline(True)
    try:
        yield
    finally:
        _C._set_timeline(False)


def device_count() -> int:
    ensure_initialized()
    return len(_C._runtime_info()["devices"])
