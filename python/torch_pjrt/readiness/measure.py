"""What a readiness part reads while it runs: counters, memory, settling.

Compile time is torch-pjrt's program compilation (XLA) plus, where
torch.compile ran, Dynamo's whole compile (tracing, AOTAutograd and the
backend's call), from torch._dynamo's own timers.
"""

from __future__ import annotations

import statistics
import sys
from typing import Optional

import torch

from torch_pjrt.bench.core import PeakSampler

import torch_pjrt


def _dynamo_seconds() -> float:
    if "torch._dynamo" not in sys.modules:
        return 0.0
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))


def counters() -> dict:
    m = torch_pjrt.metrics()
    return {
        "compilations": m["compilations"], "executions": m["executions"],
        "host_syncs": m["host_syncs"], "compile_s": m["compile_seconds"] + _dynamo_seconds(),
        "recompile_reasons": dict(m["recompile_reasons"]), "fallback_ops": dict(m["fallback_ops"]),
    }


class PeakHostMemory(PeakSampler):
    """The process's peak resident memory (MiB), sampled."""


def reset_device_peak(device: torch.device) -> None:
    if device.type == "cpu":
        return
    module = getattr(torch, device.type)
    if hasattr(module, "reset_peak_memory_stats"):
        module.reset_peak_memory_stats()


def device_peak_mib(device: torch.device) -> Optional[float]:
    if device.type == "cpu":
        return None
    module = getattr(torch, device.type)
    if not hasattr(module, "max_memory_allocated"):
        return None
    return module.max_memory_allocated() / 2**20


def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100) by linear interpolation; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None
