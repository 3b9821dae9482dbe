"""The op census: every aten op one step executes, and how it ran.

One step runs under a TorchDispatchMode that sees each op after autograd and
composite decomposition (the ops that reach the device, backward included)
and, around each, reads torch-pjrt's counters: an op whose call moved
`fallback_ops` ran on the CPU (its wall time, transfers included, is the
fallback's cost; the device is synchronised before and after each op so the
time is the op's own), one that moved `host_syncs` made the host wait, and
the user's line that led to it is taken from the Python stack. An op that
raised on the device is unsupported. Ops in other namespaces are custom ops;
ops that touched no device tensor ran on the host as part of the user's code.

The census step is slower than a real step (a sync around every op); its
time is not a speed figure.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import torch_pjrt
from torch_pjrt import _C

_TORCH_DIR = os.path.dirname(torch.__file__)
_PACKAGE_DIR = os.path.dirname(torch_pjrt.__file__)
_STDLIB_DIR = sysconfig.get_paths()["stdlib"]


@dataclass
class OpRecord:
    op: str
    count: int = 0
    status: str = "native"  # native, fallback, unsupported, custom, host
    fallback_ops: set = field(default_factory=set)
    fallback_s: float = 0.0
    error: str = ""

    def to_json(self) -> dict:
        return {"op": self.op, "count": self.count, "status": self.status,
                "fallback_ops": sorted(self.fallback_ops), "fallback_s": self.fallback_s}


def short_path(filename: str) -> str:
    """A file name without the machine's directories: from site-packages, from
    the torch_pjrt package's parent, or the working directory."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in filename:
            return filename.split(marker, 1)[1]
    parent = os.path.dirname(_PACKAGE_DIR) + os.sep
    if filename.startswith(parent):
        return filename[len(parent):]
    try:
        rel = os.path.relpath(filename)
        return rel if not rel.startswith("..") else os.path.basename(filename)
    except ValueError:
        return os.path.basename(filename)


class OpCensus(TorchDispatchMode):
    """Counts the ops run inside it; see the module docstring."""

    def __init__(self, device: torch.device, user_files: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.device = device
        self.user_files = {os.path.realpath(f) for f in user_files}
        self.ops: dict[str, OpRecord] = {}
        self.syncs: Counter = Counter()  # (site, origin, op) -> count
        self.syncs_seen = 0
        self._lock = threading.Lock()

    # -- the Python stack --------------------------------------------------
    def _is_library(self, filename: str) -> bool:
        real = os.path.realpath(filename)
        if real in self.user_files:
            return False
        return (real.startswith(_TORCH_DIR) or real.startswith(_PACKAGE_DIR)
                or real.startswith(_STDLIB_DIR) or filename.startswith("<"))

    def _sites(self) -> tuple[str, Optional[str]]:
        """(the innermost frame outside torch, torch_pjrt and the standard
        library; the workload file's innermost frame, if another)."""
        frame = sys._getframe(2)
        site = origin = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if site is None and not self._is_library(filename):
                site = f"{short_path(filename)}:{frame.f_lineno}"
            if origin is None and os.path.realpath(filename) in self.user_files:
                origin = f"{short_path(filename)}:{frame.f_lineno}"
            if site is not None and origin is not None:
                break
            frame = frame.f_back
        if site is None:
            return ("autograd backward (no Python frame)"
                    if threading.current_thread() is not threading.main_thread()
                    else "(inside torch)"), origin
        return site, (origin if origin != site else None)

    # -- the dispatch ------------------------------------------------------
    def _touches_device(self, args: Any, kwargs: Any, out: Any = None) -> bool:
        for t in pytree.tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor) and t.device.type == self.device.type:
                return True
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        on_device = self._touches_device(args, kwargs)
        if on_device:
            _C._synchronize(-1)
        before = _C._counters()
        start = time.perf_counter()
        try:
            out = func(*args, **kwargs)
        except Exception as error:
            with self._lock:
                rec = self.ops.setdefault(name, OpRecord(name))
                rec.count += 1
                if on_device:
                    rec.status = "unsupported"
                    rec.error = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            raise
        on_device = on_device or self._touches_device((), {}, out)
        if on_device:
            _C._synchronize(-1)
        seconds = time.perf_counter() - start
        after = _C._counters()
        fell_back = {op for op, n in after["fallback_ops"].items()
                     if n > before["fallback_ops"].get(op, 0)}
        synced = after["host_syncs"] - before["host_syncs"]
        site = self._sites() if synced > 0 else None
        with self._lock:
            rec = self.ops.setdefault(name, OpRecord(name))
            rec.count += 1
            if not on_device:
                if rec.status == "native":
                    rec.status = "host"
            elif rec.status != "unsupported":
                if fell_back:
                    rec.status = "fallback"
                    rec.fallback_ops |= fell_back
                    rec.fallback_s += seconds
                elif rec.status == "host":
                    rec.status = "native"
                if rec.status == "native" and func.namespace not in ("aten", "prims"):
                    rec.status = "custom"
            if site is not None:
                self.syncs_seen += synced
                self.syncs[(site[0], site[1], name)] += synced
        return out

    # -- the result --------------------------------------------------------
    def to_json(self, part: str, step_s: float, total_syncs: int) -> dict:
        order = {"unsupported": 0, "fallback": 1, "custom": 2, "native": 3, "host": 4}
        ops = sorted(self.ops.values(), key=lambda r: (order[r.status], -r.count, r.op))
        totals = {k: sum(r.count for r in ops if r.status == k) for k in order}
        totals["fallback_s"] = sum(r.fallback_s for r in ops)
        syncs = [{"site": site, "origin": origin, "op": op, "count": n}
                 for (site, origin, op), n in self.syncs.most_common()]
        if total_syncs > self.syncs_seen:  # e.g. printing a tensor, which hides its ops
            syncs.append({"site": "(not inside an op the census sees: printing, or a copy "
                                  "outside the step)", "origin": None, "op": "—",
                          "count": total_syncs - self.syncs_seen})
        return {"part": part, "step_s": step_s, "ops": [r.to_json() for r in ops],
                "totals": totals, "syncs": syncs,
                "errors": {r.op: r.error for r in ops if r.error}}
