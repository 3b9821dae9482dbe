"""torch.tpu: the device module PyTorch code reaches through torch.<device>.

Mirrors the parts of torch.cuda that portable code calls: device selection,
synchronisation, seeds and RNG state, memory statistics, properties, AMP
dtypes, and Stream/Event objects that order work the way PJRT does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from . import _C
from . import runtime as _runtime
from ._settings import settings


def _name() -> str:
    return settings().device_name


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != _name():
        raise ValueError(f"Expected a {_name()} device, but got: {device}")
    return current_device() if device.index is None else device.index


def is_available() -> bool:
    return _C._runtime_initialized() and device_count() > 0


def is_initialized() -> bool:
    return _C._runtime_initialized()


def init() -> None:
    _runtime.ensure_initialized()


def device_count() -> int:
    if not _C._runtime_initialized():
        return 0
    return len(_C._runtime_info()["devices"])


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    index = _index(device)
    if not 0 <= index < device_count():
        raise RuntimeError(
            f"{_name()}: invalid device index {index}; {device_count()} device(s) are available"
        )
    _C._set_current_device(index)


class device:
    """Context manager that makes `device` current and restores the previous one."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc):
        if self.index >= 0:
            set_device(self.previous)
        return False


class device_of(device):
    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.device.index if obj.device.type == _name() else None)


def synchronize(device: Any = None) -> None:
    """Waits for everything launched on `device` (all devices when None)."""
    _C._synchronize(-1 if device is None else _index(device))


# --- random numbers -------------------------------------------------------------


def _generator(device: Any = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, state in enumerate(states):
        set_rng_state(state, i)


# --- properties -------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    platform: str
    platform_version: str
    plugin: str
    pjrt_api_version: str
    xla_version: int | None
    stablehlo_version: str
    total_memory: int  # the host's share for devices that report no limit

    def __repr__(self) -> str:
        return (
            f"DeviceProperties(name={self.name!r}, platform={self.platform!r}, "
            f"plugin={self.plugin!r}, pjrt_api_version={self.pjrt_api_version!r})"
        )


def _host_share() -> tuple[int, int]:
    """(free, total) bytes of host memory per device, for plugins whose
    devices are the host (the XLA CPU plugin reports no memory of its own)."""
    import os

    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:  # MemAvailable counts reclaimable caches, as psutil does
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    n = max(device_count(), 1)
    return available // n, pages // n


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of `device`, as torch.cuda.mem_get_info. Devices
    that report no limit of their own (the CPU plugin's) share the host's
    memory equally."""
    index = _index(device)
    stats = _C._memory_stats(index)
    limit = dict(stats).get("bytes_limit")
    if limit:
        return int(limit) - int(dict(stats).get("bytes_in_use", 0)), int(limit)
    free, total = _host_share()
    return max(free - memory_allocated(index), 0), total


def get_device_properties(device: Any = None) -> DeviceProperties:
    info = _runtime.info()
    index = _index(device)
    if not 0 <= index < len(info["devices"]):
        raise RuntimeError(f"{_name()}: invalid device index {index}")
    d = info["devices"][index]
    attrs = info["attributes"]
    return DeviceProperties(
        name=d["kind"],
        platform=info["platform_name"],
        platform_version=info["platform_version"],
        plugin=info["plugin_path"].rsplit("/", 1)[-1],
        pjrt_api_version=".".join(map(str, info["pjrt_api_version"])),
        xla_version=attrs.get("xla_version"),
        stablehlo_version=".".join(map(str, attrs.get("stablehlo_current_version", []))),
        total_memory=d.get("bytes_limit") or _host_share()[1],
    )


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (0, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


# --- memory -------------------------------------------------------------------------


def memory_stats(device: Any = None) -> dict[str, int]:
    return dict(_C._memory_stats(_index(device)))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C._reset_peak_memory(_index(device))


def memory_reserved(device: Any = None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device: Any = None) -> int:
    return max_memory_allocated(device)


def empty_cache() -> None:
    """Device memory is freed when its last tensor goes; nothing is cached."""


# --- streams and events ---------------------------------------------------------------


class Stream:
    """The device's one in-order queue. PJRT orders work by data dependencies,
    so waiting on a stream means waiting for the device."""

    def __init__(self, device: Any = None, priority: int = 0):
        self.device = torch.device(_name(), _index(device))
        self.priority = priority

    def synchronize(self) -> None:
        synchronize(self.device)

    def query(self) -> bool:
        return True

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: "Event") -> None:
        pass

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self) -> int:
        return hash(self.device)

    def __repr__(self) -> str:
        return f"<torch.{_name()}.Stream device={self.device} priority={self.priority}>"


class Event:
    """Marks a point in the device's work; timing waits for the work first."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time: float | None = None
        self._device: torch.device | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = stream or current_stream()
        self._device = stream.device
        if self.enable_timing:
            synchronize(stream.device)
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        if self._device is not None:
            synchronize(self._device)

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: "Event") -> float:
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end_event._time - self._time) * 1000.0


_current_streams = threading.local()


def current_stream(device: Any = None) -> Stream:
    """The stream set by `stream(...)` on this thread for `device`, else its default stream."""
    index = _index(device)
    streams = getattr(_current_streams, "by_device", {})
    return streams.get(index) or Stream(index)


def default_stream(device: Any = None) -> Stream:
    return Stream(device)


def set_stream(s: Stream) -> None:
    if not hasattr(_current_streams, "by_device"):
        _current_streams.by_device = {}
    _current_streams.by_device[s.device.index] = s


@contextlib.contextmanager
def stream(s: Stream | None):
    """Makes `s` the current stream, and its device the current device, as
    torch.cuda.stream does; both are restored on exit."""
    if s is None:
        yield s
        return
    previous_device = current_device()
    previous_stream = current_stream(s.device.index)
    set_device(s.device.index)
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(previous_stream)
        set_device(previous_device)


def _is_in_bad_fork() -> bool:
    return False
