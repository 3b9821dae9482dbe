"""The settings table: every TORCH_PJRT_* environment variable, read once.

One place reads the environment; everything else asks `settings()`. A bad
value is a ValueError naming the variable and what it accepts.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

EAGER_MODES = ("strict", "debug", "fused")
FALLBACK_MODES = ("allow", "warn", "error")
INDUCTOR_MODES = ("tpu", "inductor")


@dataclass(frozen=True)
class Settings:
    plugin: str  # cpu, cuda, tpu, a path, or "" for automatic
    device_name: str
    eager: str
    fallback: str
    cpu_devices: int
    cache_dir: str  # "" disables the disk cache
    dump_dir: str  # "" when unset
    inductor: str  # where torch.compile()'s default sends graphs on the device
    fused_max_ops: int  # fused eager: launches a pending graph holds before it runs


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower() or default
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{name}={raw!r} must be at least 1")
    return value


def _device_name() -> str:
    name = os.environ.get("TORCH_PJRT_DEVICE_NAME", "tpu").strip() or "tpu"
    if not name.isidentifier() or name in ("cpu", "cuda", "meta", "xla", "mps"):
        raise ValueError(
            f"TORCH_PJRT_DEVICE_NAME={name!r} must be a Python identifier and not a name "
            "PyTorch already uses"
        )
    return name


def _cache_dir() -> str:
    if "TORCH_PJRT_CACHE_DIR" in os.environ:
        value = os.environ["TORCH_PJRT_CACHE_DIR"].strip()
        return str(Path(value).expanduser()) if value else ""
    return str(Path("~/.cache/torch_pjrt").expanduser())


@functools.cache
def settings() -> Settings:
    """The settings of this process, read from the environment on first call."""
    return Settings(
        plugin=os.environ.get("TORCH_PJRT_PLUGIN", "").strip(),
        device_name=_device_name(),
        eager=_choice("TORCH_PJRT_EAGER", "strict", EAGER_MODES),
        fallback=_choice("TORCH_PJRT_FALLBACK", "warn", FALLBACK_MODES),
        cpu_devices=_positive_int("TORCH_PJRT_CPU_DEVICES", 1),
        cache_dir=_cache_dir(),
        dump_dir=os.environ.get("TORCH_PJRT_DUMP_DIR", "").strip(),
        inductor=_choice("TORCH_PJRT_INDUCTOR", "tpu", INDUCTOR_MODES),
        fused_max_ops=_positive_int("TORCH_PJRT_FUSED_MAX_OPS", 1024),
    )
