"""The benchmark harness's measuring core: modes, workloads, one cell.

A *cell* is one workload in one mode. It runs in its own process (settings
such as the eager mode are read once per process, and a fresh process gives
a cold compile cache and a clean memory peak) and goes through:

1. the CPU PyTorch eager reference, from one build: the workload's first
   `check_steps` outputs, then its FLOPs per step counted by torch's
   FlopCounterMode;
2. the first step in the cell's mode, timed alone (compilation included);
3. the check: the first `check_steps` outputs against the reference; a wrong
   cell is reported with its error and is not timed;
4. warm-up steps until the step time settles;
5. `repeats` timed batches of N steps (N chosen so a batch takes at least
   `batch_s`), the device synchronised at the end of each batch.

Nothing here imports transformers or the device; workloads and modes bring
what they need.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import torch


@dataclass
class Mode:
    """How a workload runs: on which device, compiled by what."""

    name: str
    device: str  # "cpu" or the backend's device name
    compiler: Optional[str] = None  # None (eager), "tpu", "inductor", "torchax", ...
    env: dict = field(default_factory=dict)  # settings that must be set before import
    description: str = ""
    # None when the mode can run here; otherwise why not.
    unavailable: Callable[[], Optional[str]] = lambda: None

    @property
    def on_device(self) -> bool:
        return self.device != "cpu"


@dataclass
class Case:
    """One workload built for one mode: `step()` runs one step and returns
    what is checked against CPU (a tensor, a number, or a list of them);
    `sync()` waits until the step's work is done."""

    step: Callable[[], Any]
    sync: Callable[[], None] = lambda: None


@dataclass
class Workload:
    name: str
    description: str
    build: Callable[[Mode], Case]
    check: str = "close"  # "close" or "equal"
    rtol: float = 1e-4
    atol: float = 1e-5
    check_steps: int = 1
    # Modes the workload cannot run, with the reason ({"mode": "why"}).
    unsupported: dict = field(default_factory=dict)


@dataclass
class CellResult:
    workload: str
    mode: str
    status: str  # "ok", "wrong", "error", "unavailable"
    detail: str = ""
    first_step_s: Optional[float] = None
    warmup_s: Optional[float] = None
    warmup_steps: int = 0
    step_s: Optional[float] = None  # median seconds per step
    step_spread: Optional[float] = None  # (max - min) / median over the repeats
    step_samples: list = field(default_factory=list)
    steps_per_batch: int = 0
    flops_per_step: Optional[float] = None
    gflops: Optional[float] = None
    compilations_first_step: Optional[int] = None
    compilations_after_warmup: Optional[int] = None
    # From step 3 to the last timed step: torch-pjrt programs plus graphs
    # Dynamo captured (inductor's compilations count here), and the steps.
    compilations_after_step2: Optional[int] = None
    steps_after_step2: int = 0
    dynamo_graphs: Optional[int] = None  # captured over the whole cell
    compilations_total: Optional[int] = None  # programs + Dynamo graphs, whole cell
    programs_per_step: Optional[float] = None  # executions on the device
    # Under torch_pjrt.runtime.timeline(), per step: device time running
    # programs, and the gaps in which it waited for the host's next launch.
    device_busy_ms_per_step: Optional[float] = None
    device_idle_ms_per_step: Optional[float] = None
    fallbacks: Optional[int] = None
    host_syncs_per_step: Optional[float] = None
    peak_host_rss_mib: Optional[float] = None
    peak_device_mib: Optional[float] = None
    max_error: Optional[float] = None

    def to_json(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------
# Statistics

def spread(samples: list[float]) -> float:
    """(max - min) / median: how far apart the repeated measurements fell."""
    if not samples:
        return float("nan")
    med = statistics.median(samples)
    return (max(samples) - min(samples)) / med if med > 0 else float("nan")


def settled(times: list[float], window: int = 3, tolerance: float = 0.25) -> bool:
    """True when the last `window` step times agree within `tolerance` of
    their median: warm-up is over."""
    if len(times) < window:
        return False
    last = times[-window:]
    med = statistics.median(last)
    return med > 0 and all(abs(t - med) <= tolerance * med for t in last)


# ---------------------------------------------------------------------------
# Checking

def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    if isinstance(value, dict):
        return _flatten(list(value.values()))
    return [value]


def compare(got: Any, expected: Any, how: str, rtol: float, atol: float) -> tuple[bool, float, str]:
    """(matches, largest absolute error, message) for the outputs of the
    checked steps."""
    g, e = _flatten(got), _flatten(expected)
    if len(g) != len(e):
        return False, float("inf"), f"{len(g)} outputs where CPU gives {len(e)}"
    worst = 0.0
    for i, (a, b) in enumerate(zip(g, e)):
        if not isinstance(a, torch.Tensor) and hasattr(a, "__array__"):  # a JAX array
            import numpy

            a = torch.from_numpy(numpy.array(a))
        a = torch.as_tensor(a).detach().cpu()
        b = torch.as_tensor(b).detach().cpu()
        if a.shape != b.shape:
            return False, float("inf"), f"output {i}: shape {tuple(a.shape)} vs CPU {tuple(b.shape)}"
        if how == "equal":
            if not torch.equal(a, b):
                diff = (a != b).sum().item()
                return False, float(diff), f"output {i}: {diff} elements differ from CPU"
            continue
        a64, b64 = a.double(), b.double()
        err = (a64 - b64).abs()
        worst = max(worst, err.max().item() if err.numel() else 0.0)
        if not torch.allclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True):
            return False, worst, f"output {i}: max error {worst:.3g} (rtol {rtol}, atol {atol})"
    return True, worst, ""


# ---------------------------------------------------------------------------
# Memory

def rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class PeakSampler:
    """Samples the process's resident memory every few milliseconds."""

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.peak = rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib())
            self._stop.wait(self.period_s)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib())


# ---------------------------------------------------------------------------
# One cell

def reference(workload: Workload, cpu_mode: Mode) -> tuple[list, Optional[float]]:
    """On one CPU-eager build of the workload: the outputs of its first
    `check_steps` steps, then the FLOPs of one more step counted by torch's
    FlopCounterMode (matmuls, convolutions, attention; elementwise ops count
    zero). FLOPs are None where the counter cannot follow the workload."""
    from torch.utils.flop_counter import FlopCounterMode

    case = workload.build(cpu_mode)
    outputs = [case.step() for _ in range(workload.check_steps)]
    try:
        counter = FlopCounterMode(display=False)
        with counter:
            case.step()
        total = counter.get_total_flops()
        flops = float(total) if total else None
    except Exception:  # a workload the counter cannot follow: no FLOP figures
        flops = None
    return outputs, flops


def _dynamo_graphs() -> int:
    """Graphs Dynamo has captured in this process (any backend)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _counters() -> dict:
    out = {"compilations": 0, "fallbacks": 0, "host_syncs": 0, "executions": 0}
    try:
        import torch_pjrt

        m = torch_pjrt.metrics()
        out = {"compilations": m["compilations"] + m["cache_hits_disk"],
               "fallbacks": sum(m["fallback_ops"].values()), "host_syncs": m["host_syncs"],
               "executions": m["executions"]}
    except Exception:
        pass
    out["dynamo_graphs"] = _dynamo_graphs()
    jax_forms = sys.modules.get("torch_pjrt.bench.jax_forms")
    if jax_forms is not None:  # a JAX cell: XLA compilations JAX did
        out["compilations"] += jax_forms.compilations()
    return out


def _all_compilations(c: dict) -> int:
    return c["compilations"] + c["dynamo_graphs"]


class _Counted:
    """Counts a case's steps and snapshots the counters after the second."""

    def __init__(self, case: Case) -> None:
        self.case, self.steps, self.after_two = case, 0, None

    def step(self):
        out = self.case.step()
        self.steps += 1
        if self.steps == 2:
            self.case.sync()
            self.after_two = _counters()
        return out


def run_cell(workload: Workload, mode: Mode, cpu_mode: Mode, *, repeats: int = 5,
             batch_s: float = 0.05, max_warmup_steps: int = 20, time_budget_s: float = 60.0,
             expected: Optional[list] = None, flops: Optional[float] = None) -> CellResult:
    """Measures one cell in this process. The CPU reference outputs
    (`expected`) and `flops` may be given; otherwise they are computed here."""
    result = CellResult(workload=workload.name, mode=mode.name, status="ok")
    why = workload.unsupported.get(mode.name) or mode.unavailable()
    if why:
        result.status, result.detail = "unavailable", why
        return result
    try:
        if expected is None:
            expected, flops = reference(workload, cpu_mode)
        result.flops_per_step = flops
        device_stats = mode.on_device and hasattr(torch, mode.device)
        if device_stats:
            getattr(torch, mode.device).reset_peak_memory_stats()
        with PeakSampler() as sampler:
            before = _counters()
            case = workload.build(mode)
            if mode.env.get("TORCH_PJRT_EAGER") == "fused":
                case = _materialized(case)
            counted = _Counted(case)
            case = Case(step=counted.step, sync=case.sync)
            start = time.perf_counter()
            outputs = [case.step()]
            case.sync()
            result.first_step_s = time.perf_counter() - start
            result.compilations_first_step = _counters()["compilations"] - before["compilations"]
            for _ in range(workload.check_steps - 1):
                outputs.append(case.step())
            case.sync()
            ok, err, message = compare(outputs, expected, workload.check, workload.rtol,
                                       workload.atol)
            result.max_error = err
            if not ok:
                result.status, result.detail = "wrong", message
                return result

            # Warm-up: until three consecutive steps agree.
            times: list[float] = []
            warm_start = time.perf_counter()
            while len(times) < max_warmup_steps:
                t = time.perf_counter()
                case.step()
                case.sync()
                times.append(time.perf_counter() - t)
                if settled(times):
                    break
            result.warmup_steps = len(times)
            result.warmup_s = time.perf_counter() - warm_start
            one = statistics.median(times[-3:])
            n = max(1, int(batch_s / max(one, 1e-7)))
            # Keep the whole cell within its budget.
            n = max(1, min(n, int(time_budget_s / max(one, 1e-7) / max(repeats, 1))))
            result.steps_per_batch = n
            counters = _counters()
            samples = []
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(n):
                    case.step()
                case.sync()
                samples.append((time.perf_counter() - t) / n)
            after = _counters()
            # At least 100 steps after the second, for the recompile count
            # per 100 steps (within a few seconds' budget).
            extra_start = time.perf_counter()
            while counted.steps < 102 and time.perf_counter() - extra_start < 20.0:
                case.step()
            case.sync()
            final = _counters()
            if mode.on_device and mode.device != "jax":
                _timeline(case, max(5, min(n, 50)), result)
        result.step_samples = samples
        result.step_s = statistics.median(samples)
        result.step_spread = spread(samples)
        result.compilations_after_warmup = after["compilations"] - counters["compilations"]
        if counted.after_two is not None:
            result.compilations_after_step2 = (_all_compilations(final)
                                               - _all_compilations(counted.after_two))
            result.steps_after_step2 = counted.steps - 2
        result.dynamo_graphs = final["dynamo_graphs"] - before["dynamo_graphs"]
        result.compilations_total = _all_compilations(final) - _all_compilations(before)
        if mode.on_device and mode.device != "jax":
            result.programs_per_step = (after["executions"] - counters["executions"]) / (n * repeats)
        result.fallbacks = final["fallbacks"] - before["fallbacks"]
        result.host_syncs_per_step = (after["host_syncs"] - counters["host_syncs"]) / (n * repeats)
        result.peak_host_rss_mib = round(sampler.peak, 1)
        if device_stats:
            result.peak_device_mib = round(
                getattr(torch, mode.device).max_memory_allocated() / 2**20, 2)
        if flops:
            result.gflops = flops / result.step_s / 1e9
    except Exception as error:  # reported in the table, never a crash of the run
        result.status = "error"
        result.detail = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
    return result


def _materialized(case: Case) -> Case:
    """Fused eager computes only values something holds: a step whose
    result the timing loop drops would run nothing. Each step's result is
    produced, as a user who consumes it would see it (the pending graph is
    launched, not waited for)."""
    import torch_pjrt

    def step():
        out = case.step()
        torch_pjrt.flush_pending()
        return out
    return Case(step=step, sync=case.sync)


def _timeline(case: Case, steps: int, result: CellResult) -> None:
    """Runs `steps` more steps under the runtime's timeline (apart from the
    timed ones: it adds a completion callback per execution)."""
    import torch_pjrt

    before = torch_pjrt.metrics()
    with torch_pjrt.runtime.timeline():
        for _ in range(steps):
            case.step()
        case.sync()
    programs = torch_pjrt.metrics()["executions"] - before["executions"]
    deadline = time.perf_counter() + 5.0
    while (torch_pjrt.metrics()["timeline_programs"] - before["timeline_programs"] < programs
           and time.perf_counter() < deadline):
        time.sleep(0.005)  # completion callbacks still arriving
    after = torch_pjrt.metrics()
    result.device_busy_ms_per_step = (after["device_busy_seconds"]
                                      - before["device_busy_seconds"]) * 1e3 / steps
    result.device_idle_ms_per_step = (after["device_idle_seconds"]
                                      - before["device_idle_seconds"]) * 1e3 / steps


def pin_threads() -> None:
    """Same intra-op threads for every cell (CPU PyTorch and inductor)."""
    n = os.cpu_count() or 1
    torch.set_num_threads(n)
