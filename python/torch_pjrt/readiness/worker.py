"""One part of a readiness run (one device in one mode), in its own process.

    python -m torch_pjrt.readiness.worker SPEC.json

A fresh process per part gives each mode its own settings (the eager mode is
read at import), a cold compile cache, a clean memory peak, and lets a crash
(an abort, a killed process) take down one part, not the report. The part's
record is rewritten after every phase, so whatever finished survives a crash,
the budget's end or Ctrl-C:

1. build the workload (seeded), then the quality run: every batch of the
   slice at the first size, each step timed to its result on the host; the
   results go to a .pt file the parent compares with the reference's;
2. the op census (device parts in an eager mode): one more step, see
   op_census.py;
3. timing: warm-up until step times settle, then steps timed one by one;
4. the other sizes: two steps each, with compilations, compile time,
   recompile reasons and peak memory.

Phases 2-4 stop at the part's soft deadline; the parent kills the process at
the run's hard deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import traceback
from typing import Any

import torch


class Stopped(Exception):
    """The parent asked this part to stop (its budget ran out)."""


def _write(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, default=str)
    os.replace(tmp, path)


def _error_text(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:400] if lines else ''}"


class Part:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.path = spec["record"]
        self.record: dict[str, Any] = {
            "name": spec["name"], "device": spec["device"], "mode": spec["mode"],
            "role": spec["role"], "status": "running", "phase": "starting", "progress": 0.0,
            "detail": "", "startup_s": None, "build_s": None, "quality": None, "census": None,
            "timing": None, "sizes": [], "compile": None, "peak_host_mib": None,
            "peak_device_mib": None, "parameters": None,
        }
        self.hard = spec["hard_deadline"]
        self.soft = spec["soft_deadline"]

    def save(self, phase: str | None = None, progress: float | None = None) -> None:
        if phase is not None:
            self.record["phase"] = phase
        if progress is not None:
            self.record["progress"] = progress
        _write(self.path, self.record)

    def check_hard(self) -> None:
        if time.time() > self.hard:
            raise Stopped()

    def soft_over(self) -> bool:
        return time.time() > self.soft

    # ------------------------------------------------------------------
    def run(self) -> None:
        import torch_pjrt  # noqa: F401  (registers the device before anything is built)

        from . import protocol
        from .measure import PeakHostMemory, device_peak_mib, reset_device_peak

        spec = self.spec
        self.record["startup_s"] = time.time() - spec["spawned"]
        workload = protocol.load(spec["workload"])
        device = torch.device(spec["device"])
        self.record["device_info"] = _describe(device)
        backend = None
        if spec["mode"] == "compiled":
            from torch_pjrt._compile import tpu_backend

            backend = tpu_backend if device.type != "cpu" else "inductor"
        target = protocol.Target(device, spec["mode"], backend)
        self.workload, self.target = workload, target
        sizes = [protocol.Size.parse(s) for s in spec["sizes"]]
        with PeakHostMemory() as host:
            self.host = host
            reset_device_peak(device)
            self.save("build", 0.02)
            torch.manual_seed(spec["seed"])
            start = time.perf_counter()
            step = workload.build(target)
            target.synchronize()
            self.record["build_s"] = time.perf_counter() - start
            self.step = step
            try:
                self.quality(sizes[0])
            except Stopped:
                raise
            except Exception:
                if spec.get("census"):  # the census names the op that fails
                    try:
                        self.census(sizes[0])
                    except Exception:
                        pass
                raise
            self.record["peak_device_mib"] = device_peak_mib(device)
            self.record["peak_host_mib"] = host.peak
            self.save()
            phases = [("census", self.census), ("timing", self.timing),
                      ("sizes", lambda s: self.other_sizes(sizes[1:]))]
            for name, fn in phases:
                if name == "census" and not spec.get("census"):
                    continue
                if self.soft_over():
                    self.record["detail"] += f"{name}: not run, the part's share of the budget was spent. "
                    continue
                try:
                    fn(sizes[0])
                except Stopped:
                    raise
                except Exception as error:  # a later phase failing keeps what came before
                    self.record["detail"] += f"{name} failed: {_error_text(error)}. "
                self.record["peak_device_mib"] = max(self.record["peak_device_mib"] or 0,
                                                     device_peak_mib(device) or 0) or None
                self.record["peak_host_mib"] = host.peak
                self.save()
        if spec["mode"] == "compiled":
            self.record["compile"] = _compile_summary()
        self.record["status"] = "done"
        self.save("done", 1.0)

    # ------------------------------------------------------------------
    def quality(self, size) -> None:
        """The slice at the first size, every step timed to its result."""
        from . import protocol
        from .measure import counters

        workload, target = self.workload, self.target
        batches = list(workload.data(size))
        if not batches:
            raise ValueError(f"workload {workload.name}: data({size}) gave no batches")
        results, times = [], []
        before = counters()
        first = None
        for i, batch in enumerate(batches):
            self.check_hard()
            start = time.perf_counter()
            out = protocol.to_host(protocol.call_step(self.step, protocol.to_device(batch, target.device)))
            times.append(time.perf_counter() - start)
            results.append(out)
            if i == 0:
                first = counters()
            self.save("quality", 0.05 + 0.45 * (i + 1) / len(batches))
        after = counters()
        results_file = self.path[:-len(".json")] + ".pt"
        torch.save(results, results_file)
        reached = None
        if workload.kind == "train" and workload.target is not None:
            for k in range(len(results)):
                if workload.reached(workload.metric(results[: k + 1])):
                    reached = k
                    break
        self.record["quality"] = {
            "size": str(size), "steps": len(results), "step_s": times, "results": results_file,
            "metric": workload.metric(results), "target_reached_step": reached,
            "compilations_first_step": first["compilations"] - before["compilations"],
            "compilations": after["compilations"] - before["compilations"],
            "compile_s": after["compile_s"] - before["compile_s"],
            "recompile_reasons": _reasons(_delta(after["recompile_reasons"], before["recompile_reasons"])),
            "fallback_ops": _delta(after["fallback_ops"], before["fallback_ops"]),
        }
        self.record["parameters"] = _parameters(self.step)

    def census(self, size) -> None:
        from torch_pjrt import eager_mode

        from . import protocol
        from .measure import counters
        from .op_census import OpCensus

        batch = protocol.to_device(self.workload.data(size)[0], self.target.device)
        user_files = (self.spec["workload"]["file"],) if "file" in self.spec["workload"] else ()
        if "example" in self.spec["workload"]:
            from . import examples

            user_files = (examples.__file__,)
        self.save("census", 0.55)
        with eager_mode("strict"):
            before = counters()
            census = OpCensus(self.target.device, user_files)
            start = time.perf_counter()
            failure = None
            with census:
                try:
                    result = protocol.call_step(self.step, batch)
                except Exception as error:  # recorded as unsupported by the census
                    result, failure = None, _error_text(error)
            self.target.synchronize()
            seconds = time.perf_counter() - start
            protocol.to_host(result)  # the tool's own read-back: not the workload's sync
            syncs = counters()["host_syncs"] - before["host_syncs"] - _readback_syncs(result)
        self.record["census"] = census.to_json(self.spec["name"], seconds, syncs)
        self.record["census"]["failure"] = failure

    def timing(self, size) -> None:
        from . import protocol
        from torch_pjrt.bench.core import settled

        from .measure import counters

        workload, target = self.workload, self.target
        batches = [protocol.to_device(b, target.device) for b in workload.data(size)]
        self.save("warm-up", 0.6)
        warm: list[float] = []
        while len(warm) < self.spec["max_warmup"] and not settled(warm):
            self.check_hard()
            if self.soft_over():
                break
            start = time.perf_counter()
            result = protocol.call_step(self.step, batches[len(warm) % len(batches)])
            target.synchronize()
            del result
            warm.append(time.perf_counter() - start)
        before = counters()
        times: list[float] = []
        for i in range(self.spec["timed_steps"]):
            self.check_hard()
            if self.soft_over() and len(times) >= 3:
                break
            start = time.perf_counter()
            # Held until the device is done: fused eager computes nothing
            # no live tensor needs, so a dropped result would time nothing.
            result = protocol.call_step(self.step, batches[i % len(batches)])
            target.synchronize()
            del result
            times.append(time.perf_counter() - start)
            self.save("timing", 0.65 + 0.2 * (i + 1) / self.spec["timed_steps"])
        after = counters()
        n = max(len(times), 1)
        self.record["timing"] = {
            "size": str(size), "warmup_steps": len(warm), "step_s": times,
            "programs_per_step": (after["executions"] - before["executions"]) / n,
            "host_syncs_per_step": (after["host_syncs"] - before["host_syncs"]) / n,
            "compilations_after_warmup": after["compilations"] - before["compilations"],
            "fallback_ops": _delta(after["fallback_ops"], before["fallback_ops"]),
        }

    def other_sizes(self, sizes) -> None:
        from . import protocol
        from .measure import counters, device_peak_mib, reset_device_peak

        target = self.target
        for index, size in enumerate(sizes):
            entry: dict[str, Any] = {"size": str(size), "status": "not-run", "detail": ""}
            self.record["sizes"].append(entry)
            if self.soft_over():
                entry.update(status="budget", detail="the part's share of the budget was spent")
                continue
            self.save("sizes", 0.85 + 0.15 * index / max(len(sizes), 1))
            try:
                batches = list(self.workload.data(size))[:2]
                reset_device_peak(target.device)
                before = counters()
                times = []
                for batch in batches:
                    self.check_hard()
                    start = time.perf_counter()
                    protocol.to_host(protocol.call_step(self.step, protocol.to_device(batch, target.device)))
                    times.append(time.perf_counter() - start)
                after = counters()
                entry.update(
                    status="done", first_step_s=times[0], step_s=times[-1] if len(times) > 1 else None,
                    compilations=after["compilations"] - before["compilations"],
                    compile_s=after["compile_s"] - before["compile_s"],
                    recompile_reasons=_reasons(_delta(after["recompile_reasons"], before["recompile_reasons"])),
                    peak_device_mib=device_peak_mib(target.device))
            except Stopped:
                raise
            except Exception as error:
                entry.update(status="error", detail=_error_text(error))


def _describe(device: torch.device) -> str:
    if device.type == "cpu":
        import platform

        return f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, CPU PyTorch {torch.__version__}"
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name()}"
    from torch_pjrt import runtime

    info = runtime.info()
    kinds = sorted({d["kind"] for d in info["devices"]})
    return (f"{device.type}: {len(info['devices'])} device(s) of kind {', '.join(kinds)} through the "
            f"PJRT plugin {info['plugin_name']}")


def _readback_syncs(result: Any) -> int:
    import torch.utils._pytree as pytree

    return sum(1 for t in pytree.tree_leaves(result)
               if isinstance(t, torch.Tensor) and t.device.type != "cpu")


def _reasons(reasons: dict) -> dict:
    """Recompile reasons, readable: eager ones grouped by kind ("new shape:
    aten::mm" -> "new shape", with up to three of the ops it hit), others
    (Dynamo's guard failures) by their first line."""
    groups: dict[str, list] = {}
    for key, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        line = key.splitlines()[0].strip() if key.strip() else key
        match = re.fullmatch(r"(new \w+): (\S+)", line)
        kind, op = (match.group(1), match.group(2)) if match else (line[:160], "")
        entry = groups.setdefault(kind, [0, []])
        entry[0] += n
        if op:
            entry[1].append(op)
    out = {}
    for kind, (n, ops) in groups.items():
        shown = ", ".join(ops[:3]) + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")
        out[f"{kind} ({shown})" if ops else kind] = n
    return out


def _delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def _parameters(step: Any) -> int | None:
    """Parameters of the modules the step closes over (best effort)."""
    seen: set[int] = set()
    total = 0
    cells = []
    fn = step
    for _ in range(3):  # the step may wrap a compiled or inner function
        cells += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "_torchdynamo_orig_callable", None)
        if fn is None:
            break
    for value in list(cells):
        if callable(value) and getattr(value, "__closure__", None):
            cells += [c.cell_contents for c in value.__closure__ if _filled(c)]
    for value in cells:
        module = getattr(value, "_orig_mod", value)
        if isinstance(module, torch.nn.Module):
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel()
    return total or None


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _compile_summary() -> dict:
    import torch_pjrt

    report = torch_pjrt.compile_report()
    eager: dict[str, int] = {}
    for graph in report:
        for op, n in graph["eager_ops"].items():
            eager[op] = eager.get(op, 0) + n
    breaks = 0
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters as dynamo_counters

        breaks = sum(dynamo_counters["graph_break"].values())
    return {"graphs": len(report), "graph_breaks": int(breaks),
            "programs": sum(len(g["compiles"]) for g in report), "eager_ops": eager}


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    part = Part(spec)

    def on_term(signum, frame):
        raise Stopped()
    signal.signal(signal.SIGTERM, on_term)
    try:
        part.run()
        return 0
    except Stopped:
        part.record["status"] = "budget"
        part.record["detail"] += f"stopped in phase {part.record['phase']}: the budget ran out. "
    except KeyboardInterrupt:
        part.record["status"] = "interrupted"
        part.record["detail"] += f"interrupted in phase {part.record['phase']}. "
    except Exception as error:
        part.record["status"] = "error"
        part.record["detail"] += f"{part.record['phase']}: {_error_text(error)}"
        part.record["traceback"] = traceback.format_exc()[-4000:]
    part.save()
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
