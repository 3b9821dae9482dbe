"""Every workload the harness knows: the core ones (workloads.py) and those
from the Hugging Face libraries beyond Transformers (hf_workloads.py)."""

from __future__ import annotations

from . import hf_workloads
from . import workloads as core
from .core import Mode, Workload


def workloads(quick: bool = False) -> dict[str, Workload]:
    return {**core.workloads(quick), **hf_workloads.workloads(quick)}


def modes() -> dict[str, Mode]:
    return core.modes()
