"""The readiness run: plan the parts, run each in its own process under the
budget, and hand what came back to the report.

Parts run one at a time (the machine's cores are the measuring instrument):
the CPU reference first (and CUDA eager where a GPU is present), then the
target device in each mode asked for. Each part gets an even share of what is
left of the budget for its optional phases (a soft deadline it honours
itself); at the budget's end the running part is stopped (SIGTERM, then
SIGKILL) and the parts not started are marked so. Ctrl-C does the same and
the report is still written; so does a part that crashes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from .progress import Progress
from .protocol import Size, Workload

MODES = ("strict", "fused", "compiled")
EAGER_SETTING = {"strict": "strict", "fused": "fused", "compiled": "strict", "eager": "strict"}
REPORT_RESERVE_S = 3.0  # kept back from the budget to write the report
STOP_GRACE_S = 8.0  # how long a stopped part may take to save its record


@dataclass
class Plan:
    workload_spec: dict
    workload: Workload
    modes: list
    sizes: list
    out: Path
    budget_s: Optional[float] = None
    prices: dict = field(default_factory=dict)
    seed: int = 0
    target_device: str = "tpu"
    references: list = field(default_factory=lambda: ["cpu"])
    timed_steps: int = 10
    max_warmup: int = 8
    device_memory_gib: Optional[float] = None
    command: str = ""
    # False: every part starts cold (no torch-pjrt disk cache, a fresh
    # inductor/AOTAutograd cache), so first-step and compile figures are what
    # a first run pays. True: the user's caches, as a second run sees them.
    warm_cache: bool = False


@dataclass
class PartRun:
    name: str
    device: str
    mode: str
    role: str
    status: str = "not-run"  # done, error, crashed, budget, interrupted, not-run
    detail: str = ""
    wall_s: float = 0.0
    record: dict = field(default_factory=dict)
    log: str = ""


def plan_parts(plan: Plan) -> list[PartRun]:
    parts = [PartRun(f"{dev} eager", dev, "eager", "reference") for dev in plan.references]
    for mode in plan.modes:
        parts.append(PartRun(f"{plan.target_device} {mode}", plan.target_device, mode, "target"))
    return parts


def default_references() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class Runner:
    def __init__(self, plan: Plan, progress: Optional[Progress] = None) -> None:
        self.plan = plan
        self.parts = plan_parts(plan)
        self.progress = progress or Progress(len(self.parts), plan.budget_s)
        self.start = time.time()
        self.hard = (self.start + plan.budget_s - REPORT_RESERVE_S) if plan.budget_s else float("inf")
        self.stopped: Optional[str] = None  # None, "budget", "interrupted"
        (plan.out / "parts").mkdir(parents=True, exist_ok=True)

    def run(self) -> list[PartRun]:
        try:
            for index, part in enumerate(self.parts):
                if self.stopped:
                    part.status, part.detail = self.stopped, f"not started: {self._why()}"
                    continue
                if time.time() >= self.hard:
                    self.stopped = "budget"
                    part.status, part.detail = "budget", "not started: the budget was spent"
                    continue
                self._run_part(index, part)
        except KeyboardInterrupt:
            self.stopped = "interrupted"
            for part in self.parts:
                if part.status == "not-run":
                    part.status, part.detail = "interrupted", "not started: interrupted (Ctrl-C)"
        finally:
            self.progress.close()
        return self.parts

    def _why(self) -> str:
        return "the budget was spent" if self.stopped == "budget" else "interrupted (Ctrl-C)"

    def _spec(self, part: PartRun, index: int) -> dict:
        plan = self.plan
        now = time.time()
        left = self.hard - now
        share = left / (len(self.parts) - index) if left != float("inf") else float("inf")
        slug = part.name.replace(" ", "-")
        return {
            "name": part.name, "device": part.device, "mode": part.mode, "role": part.role,
            "workload": plan.workload_spec, "sizes": [str(s) for s in plan.sizes],
            "seed": plan.seed, "census": part is self._census_part(),
            "timed_steps": plan.timed_steps, "max_warmup": plan.max_warmup,
            "record": str(plan.out / "parts" / f"{slug}.json"),
            "hard_deadline": min(self.hard, 1e12), "soft_deadline": min(now + share, 1e12),
            "spawned": now,
        }

    def _census_part(self) -> Optional[PartRun]:
        """The first eager target part: the census runs once, in strict eager."""
        return next((p for p in self.parts if p.role == "target" and p.mode != "compiled"), None)

    def _run_part(self, index: int, part: PartRun) -> None:
        spec = self._spec(part, index)
        spec_path = spec["record"][: -len(".json")] + ".spec.json"
        Path(spec_path).write_text(json.dumps(spec))
        for stale in (spec["record"], spec["record"][: -len(".json")] + ".pt"):
            if os.path.exists(stale):
                os.remove(stale)
        env = dict(os.environ)
        env["TORCH_PJRT_EAGER"] = EAGER_SETTING[part.mode]
        env.setdefault("HF_HUB_OFFLINE", "1")
        scratch = tempfile.mkdtemp(prefix="readiness-cache-")
        if not self.plan.warm_cache:
            env["TORCH_PJRT_CACHE_DIR"] = ""  # no disk cache: compile everything
            env["TORCHINDUCTOR_CACHE_DIR"] = scratch
        log_path = spec["record"][: -len(".json")] + ".log"
        started = time.time()
        try:
            self._launch(index, part, spec, spec_path, env, log_path, started)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _launch(self, index: int, part: PartRun, spec: dict, spec_path: str, env: dict,
                log_path: str, started: float) -> None:
        with open(log_path, "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "torch_pjrt.readiness.worker", spec_path],
                                    stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                self._watch(index, part, proc, spec["record"])
            except KeyboardInterrupt:
                self.stopped = "interrupted"
                self._stop(proc, signal.SIGINT)
                self._collect(part, proc, spec["record"], log_path, started)
                raise
        self._collect(part, proc, spec["record"], log_path, started)

    def _watch(self, index: int, part: PartRun, proc: subprocess.Popen, record_path: str) -> None:
        while proc.poll() is None:
            record = _read(record_path)
            self.progress.update(index, part.name, record.get("phase", "starting"),
                                 record.get("progress", 0.0))
            if time.time() >= self.hard:
                self.stopped = "budget"
                self._stop(proc, signal.SIGTERM)
                break
            time.sleep(0.25)

    def _stop(self, proc: subprocess.Popen, sig: int) -> None:
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _collect(self, part: PartRun, proc: subprocess.Popen, record_path: str, log_path: str,
                 started: float) -> None:
        if proc.poll() is None:
            proc.wait()
        part.wall_s = time.time() - started
        part.record = _read(record_path)
        part.log = _tail(log_path)
        status = part.record.get("status", "running")
        if status == "running":  # it never said how it ended: it died
            code = proc.returncode
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if self.stopped and code < 0 and -code in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                part.status = self.stopped
                part.detail = f"stopped in phase {part.record.get('phase', 'starting')}: {self._why()}"
            else:
                part.status = "crashed"
                part.detail = (f"the process died ({how}) in phase {part.record.get('phase', 'starting')}"
                               f"; last output: {part.log[-600:]}")
        else:
            part.status = status
            part.detail = part.record.get("detail", "").strip()
        self.progress.message(f"{part.name}: {part.status}"
                              + (f" ({part.detail[:160]})" if part.detail else ""))


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return text[-limit:]


def parse_sizes(text: Optional[str], workload: Workload) -> list[Size]:
    if not text:
        return list(workload.sizes)
    sizes = [Size.parse(s) for s in text.split(",") if s.strip()]
    seen: list[Size] = []
    for s in sizes:
        if s not in seen:
            seen.append(s)
    return seen
