"""Runs workloads x modes, one process per cell, and writes the results.

    python -m torch_pjrt.bench [--quick] [--models a,b] [--modes x,y] [--json] [--plot]

Each cell runs in a child process (`python -m torch_pjrt.bench.cell`) with
the mode's settings in its environment and fresh, private compile caches
(ours and inductor's), so its first step is a cold start and its memory
peak is its own. A progress
bar says which cell runs and how long is left (estimated from the cells run
so far).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from . import report
from .core import CellResult
from .machine import cpu_model, machine_tag, memory_gib

DEFAULT_MODES = ["cpu_eager", "cpu_inductor", "tpu_debug", "tpu_strict", "tpu_compiled", "jax_jit",
                 "torchax_eager", "torchax_jit"]


def machine_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"cpu_model": cpu_model(), "cores": os.cpu_count(),
                             "memory_gib": memory_gib(), "os": platform.platform(),
                             "python": platform.python_version()}
    try:
        import torch_pjrt

        info = torch_pjrt.runtime.info()
        facts.update(plugin=Path(info["plugin_path"]).name,
                     pjrt_api_version=".".join(map(str, info["pjrt_api_version"])),
                     platform_name=info["platform_name"],
                     devices=[d["debug_string"] for d in info["devices"]])
    except Exception as error:
        facts.update(plugin=None, plugin_error=str(error))
    return facts


def versions() -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "jax", "torchax"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


class Progress:
    """A one-line progress bar with an estimate of the time left."""

    def __init__(self, total: int, stream=sys.stderr, width: int = 28) -> None:
        self.total, self.done, self.stream, self.width = total, 0, stream, width
        self.start = time.monotonic()

    def show(self, label: str) -> None:
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else None
        filled = int(self.width * self.done / max(self.total, 1))
        eta = f"~{left / 60:.1f} min left" if left is not None else "estimating"
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}"
                          f"  {elapsed / 60:.1f} min, {eta}  {label:<40.40}")
        self.stream.flush()

    def step(self) -> None:
        self.done += 1

    def close(self) -> None:
        self.show("done")
        self.stream.write("\n")


def run_cell_process(workload: str, mode: str, quick: bool, repeats: int, timeout_s: float,
                     extra_env: dict[str, str], warm_start: bool = False) -> dict:
    """Runs one cell in its own process with cold caches. With warm_start,
    the same cell then runs again in a second process that finds the first
    one's caches: its first step goes into `warm_first_step_s` (and its
    compilations into `warm_compilations_first_step`)."""
    from .workloads import modes as all_modes

    env = dict(os.environ)
    env.update(all_modes()[mode].env)
    env.update(extra_env)
    with tempfile.TemporaryDirectory(prefix="torch_pjrt_bench_") as tmp:
        # Cold caches for every cell: ours and inductor's (and Triton's).
        env["TORCH_PJRT_CACHE_DIR"] = tmp
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
        env["TRITON_CACHE_DIR"] = str(Path(tmp) / "triton")
        if warm_start:
            # JAX's own persistent cache, for every program however quick
            # to compile, so its warm start is measured like ours (its cold
            # first step then includes writing that cache, as ours does).
            env["JAX_COMPILATION_CACHE_DIR"] = str(Path(tmp) / "jax")
            env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
            env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
        env.setdefault("HF_HUB_OFFLINE", "1")
        cold = _cell_once(workload, mode, quick, repeats, timeout_s, env, Path(tmp) / "cold.json")
        if not warm_start or cold["status"] != "ok":
            return cold
        warm = _cell_once(workload, mode, quick, repeats, timeout_s, env, Path(tmp) / "warm.json")
        if warm["status"] != "ok":
            return dict(warm, detail=f"warm process: {warm['detail']}")
        cold["warm_first_step_s"] = warm["first_step_s"]
        cold["warm_compilations_first_step"] = warm["compilations_first_step"]
        return cold


def _cell_once(workload: str, mode: str, quick: bool, repeats: int, timeout_s: float,
               env: dict[str, str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "torch_pjrt.bench.cell", "--workload", workload, "--mode", mode,
           "--repeats", str(repeats), "--out", str(out)] + (["--quick"] if quick else [])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return CellResult(workload, mode, "error", f"timed out after {timeout_s:.0f} s").to_json()
    if out.exists():
        return json.loads(out.read_text())
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return CellResult(workload, mode, "error",
                      f"the cell process exited with {proc.returncode}: {tail[0][:300]}").to_json()


def merge_rounds(rounds: list[dict]) -> dict:
    """One cell measured in several rounds. A round that failed wins (its
    error is the result). Otherwise the step time is the median of the
    rounds' step times (the mean of the middle two for an even count), the
    first step the median of theirs, and the other fields come from the
    round whose step time is nearest that median; every round's times are
    attached."""
    import statistics

    failed = [r for r in rounds if r["status"] != "ok"]
    if failed:
        return failed[0]
    steps = [r["step_s"] for r in rounds]
    middle = statistics.median(steps)
    chosen = dict(min(rounds, key=lambda r: abs(r["step_s"] - middle)))
    chosen["rounds_step_s"] = steps
    chosen["rounds_first_step_s"] = [r["first_step_s"] for r in rounds]
    chosen["step_s"] = middle
    chosen["first_step_s"] = statistics.median(chosen["rounds_first_step_s"])
    if all(r.get("warm_first_step_s") is not None for r in rounds):
        chosen["rounds_warm_first_step_s"] = [r["warm_first_step_s"] for r in rounds]
        chosen["warm_first_step_s"] = statistics.median(chosen["rounds_warm_first_step_s"])
    if chosen.get("flops_per_step"):
        chosen["gflops"] = chosen["flops_per_step"] / middle / 1e9
    return chosen


def run(workload_names: list[str], mode_names: list[str], *, quick: bool, repeats: int,
        title: str, timeout_s: float = 900, extra_env: Optional[dict[str, str]] = None,
        progress: bool = True, rounds: int = 1, warm_start: bool = False) -> dict[str, Any]:
    from .catalog import modes as all_modes, workloads as all_workloads

    workloads = all_workloads(quick)
    mode_table = all_modes()
    unknown = [w for w in workload_names if w not in workloads] + \
        [m for m in mode_names if m not in mode_table]
    if unknown:
        raise SystemExit(f"unknown workloads or modes: {', '.join(unknown)}; workloads: "
                         f"{', '.join(workloads)}; modes: {', '.join(mode_table)}")
    # Rounds interleave the contenders: each round runs every workload's
    # modes, in an order rotated by one per round, so slow and fast periods
    # of a shared machine fall on all of them.
    cells = [(w, mode_names[(i + r) % len(mode_names)]) for r in range(rounds)
             for w in workload_names for i in range(len(mode_names))]
    bar = Progress(len(cells)) if progress else None
    measured: dict[tuple[str, str], list[dict]] = {}
    for w, m in cells:
        if bar:
            bar.show(f"{w} / {m}")
        mode = mode_table[m]
        why = workloads[w].unsupported.get(m) or mode.unavailable()
        if why:
            result = CellResult(w, m, "unavailable", why).to_json()
        else:
            result = run_cell_process(w, m, quick, repeats, timeout_s, extra_env or {},
                                      warm_start=warm_start)
        measured.setdefault((w, m), []).append(result)
        if bar:
            bar.step()
    if bar:
        bar.close()
    results = [merge_rounds(measured[(w, m)]) for w in workload_names for m in mode_names]
    facts = machine_facts()
    return {
        "schema": "torch-pjrt/bench/1",
        "title": title,
        "date": datetime.date.today().isoformat(),
        "quick": quick,
        "repeats": repeats,
        "rounds": rounds,
        "warm_start": warm_start,
        "machine": facts,
        "versions": versions(),
        "workloads": [{"name": w, "description": workloads[w].description} for w in workload_names],
        "modes": mode_names,
        "mode_descriptions": {m: mode_table[m].description for m in mode_names},
        "results": results,
    }


def main(argv: Optional[list[str]] = None, *, default_title: str = "torch-pjrt benchmark",
         default_stem: str = "", default_models: Optional[list[str]] = None,
         default_modes: Optional[list[str]] = None) -> int:
    from .catalog import workloads as all_workloads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--models", default=",".join(default_models or all_workloads(False)))
    parser.add_argument("--modes", default=",".join(default_modes or DEFAULT_MODES))
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmarks") / "results")
    parser.add_argument("--stem", default=default_stem)
    parser.add_argument("--json", action="store_true", help="also print the JSON record")
    parser.add_argument("--plot", action="store_true", help="also write a PNG chart")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per cell")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every cell this many times, interleaved; report the median")
    parser.add_argument("--warm-start", action="store_true",
                        help="run every cell a second time in a new process that finds the "
                             "first one's caches, and report that process's first step")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    repeats = args.repeats or (5 if args.quick else 9)
    record = run([s for s in args.models.split(",") if s], [s for s in args.modes.split(",") if s],
                 quick=args.quick, repeats=repeats, title=default_title, timeout_s=args.timeout,
                 rounds=args.rounds, warm_start=args.warm_start)
    stem = (args.stem + "-" if args.stem else "") + f"{record['date']}-{machine_tag(record['machine'])}"
    if args.quick:
        stem += "-quick"
    paths = report.write(record, args.out, stem, plot=args.plot)
    print(report.markdown(record))
    if args.json:
        print(json.dumps(record, indent=2))
    for p in paths:
        print(f"wrote {p}")
    bad = [r for r in record["results"] if r["status"] in ("wrong", "error")]
    return 1 if any(r["status"] == "wrong" for r in bad) else 0
