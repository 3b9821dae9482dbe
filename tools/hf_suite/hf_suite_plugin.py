"""A pytest plugin for `make hf-suite`: records each test's outcome, the first
line of its failure, and (on the tpu device) the ops that fell back to the CPU
while it ran, one JSON object per line in $HF_SUITE_RECORD."""

from __future__ import annotations

import json
import os
from typing import Any

_records: dict[str, dict[str, Any]] = {}
_metrics = None


def _torch_pjrt():
    global _metrics
    if _metrics is None:
        try:
            import torch_pjrt
        except ImportError:
            _metrics = False
        else:
            _metrics = torch_pjrt
    return _metrics or None


def _crash_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).strip()
    text = str(report.longrepr or "").strip()
    return text.splitlines()[-1] if text else ""


def pytest_runtest_setup(item) -> None:
    tp = _torch_pjrt()
    if tp is not None:
        tp.reset_metrics()


def pytest_runtest_logreport(report) -> None:
    rec = _records.setdefault(report.nodeid, {"test": report.nodeid, "outcome": "passed",
                                              "message": "", "fallbacks": {}})
    if report.skipped:
        if hasattr(report, "wasxfail"):
            rec["outcome"] = "xfailed"
        elif rec["outcome"] == "passed":
            rec["outcome"] = "skipped"
            rec["message"] = _crash_line(report)
    elif report.failed:
        if rec["outcome"] != "failed":
            rec["outcome"] = "failed" if report.when == "call" else "error"
            rec["message"] = _crash_line(report)
    if report.when == "teardown":
        tp = _torch_pjrt()
        if tp is not None:
            rec["fallbacks"] = dict(tp.metrics().get("fallback_ops", {}))
        rec["duration"] = round(getattr(report, "duration", 0.0), 3)


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("HF_SUITE_RECORD")
    if not path:
        return
    with open(path, "w") as f:
        for rec in _records.values():
            f.write(json.dumps(rec) + "\n")
