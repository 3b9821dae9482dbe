"""Correctness first: a target part's results against the reference's.

Both ran the same workload from the same seed on the same slice. Each step's
result is compared (the workload's rtol/atol, every output), the task
metric within the workload's metric tolerance, and, for inference, each task
in each batch with the workload's per-task check. A target passes only if all
three hold over every step the reference ran; a part that stopped early is
"incomplete" unless what it did run already disagrees ("fail").
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from torch_pjrt.bench.core import compare

from .protocol import Workload


def _load(record: dict) -> Optional[list]:
    quality = record.get("quality") or {}
    path = quality.get("results")
    if not path:
        return None
    try:
        return torch.load(path, weights_only=False)
    except (OSError, RuntimeError):
        return None


def empty(status: str) -> dict:
    return {"status": status, "steps_compared": 0, "max_error": None, "first_mismatch": None,
            "metric": None, "reference_metric": None, "samples_ok": None, "samples": None}


def reference_entry(record: dict) -> dict:
    entry = empty("reference" if record.get("quality") else "not-run")
    if record.get("quality"):
        entry["metric"] = _finite(record["quality"].get("metric"))
        entry["steps_compared"] = record["quality"].get("steps", 0)
    return entry


def judge(workload: Workload, part_status: str, record: dict, reference: dict) -> dict:
    """The correctness entry of one target part (see the module docstring)."""
    if not reference.get("quality"):
        entry = empty("incomplete")
        entry["first_mismatch"] = "the reference did not finish its run, so nothing could be compared"
        return entry
    got, expected = _load(record), _load(reference)
    if got is None or expected is None:
        if part_status in ("error", "crashed"):
            entry = empty("error")
            entry["first_mismatch"] = record.get("detail") or "the part failed before its first result"
            return entry
        return empty("incomplete" if part_status in ("budget", "interrupted") else "not-run")

    entry = empty("pass")
    entry["reference_metric"] = _finite(reference["quality"].get("metric"))
    entry["metric"] = _finite(record["quality"].get("metric"))
    worst = 0.0
    problems: list[str] = []
    samples_ok = samples = 0
    for i, (g, e) in enumerate(zip(got, expected)):
        ok, err, message = compare(g, e, "close", workload.rtol, workload.atol)
        if math.isfinite(err):
            worst = max(worst, err)
        if not ok:
            problems.append(f"step {i + 1}: {message}")
        if workload.kind == "infer":
            flags = workload.sample_ok(g, e)
            samples_ok += sum(bool(f) for f in flags)
            samples += len(flags)
    entry["steps_compared"] = min(len(got), len(expected))
    entry["max_error"] = worst
    if workload.kind == "infer":
        entry["samples_ok"], entry["samples"] = samples_ok, samples
        if samples_ok < samples:
            problems.append(f"{samples - samples_ok} of {samples} tasks differ from the reference")
    complete = len(got) >= len(expected)
    if complete and not _metric_ok(entry["metric"], entry["reference_metric"], workload.metric_tolerance):
        problems.append(f"{workload.metric_name}: {entry['metric']} vs the reference's "
                        f"{entry['reference_metric']} (tolerance {workload.metric_tolerance})")
    if problems:
        entry["status"] = "fail"
        entry["first_mismatch"] = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
    elif not complete:
        entry["status"] = "incomplete"
        entry["first_mismatch"] = (f"ran {len(got)} of the reference's {len(expected)} steps "
                                   f"before it stopped ({part_status})")
    return entry


def _metric_ok(got: Optional[float], expected: Optional[float], tolerance: float) -> bool:
    if got is None or expected is None:
        return got is None and expected is None
    return abs(got - expected) <= tolerance


def _finite(value) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
