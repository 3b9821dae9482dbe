"""Times single aten ops in strict eager mode on the tpu device against CPU PyTorch.

    python benchmarks/eager_ops.py

For add, mul, sum, mm and cat (two tensors along dim 0), at 64x64 and
1024x1024 float32, one run measures the time per op of CPU PyTorch, of the tpu
device with one synchronize() at the end of each batch (launches overlap), and
of the tpu device with a synchronize() after every op (launch + wait). Each
figure is the median over batches of N calls, N chosen so that a batch takes
about 100 ms; the batches of the three ways are interleaved so that drift in
the machine's speed hits all of them alike.

A second table times the host read round trip: a 4-op chain at 64x64 whose
one-element result is read back with .cpu() or .item() after every chain,
against the chain alone, on the tpu device and on CPU PyTorch.

The per-op overhead of this backend on a cache hit is derived across two runs:
the tpu time with a sync after every op at 64x64, minus the PJRT launch + await
latency of the most recent runtime benchmark in benchmarks/results/
(benchmarks/runtime.py). The compile cache lives in a temporary folder, so the
user's cache is neither read nor written. Results go to
benchmarks/results/eager_ops-<date>-<machine>.{json,md}, with no host name and
no absolute path.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before torch_pjrt is imported: it reads its settings once, at import.
_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_eager_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name
os.environ["TORCH_PJRT_EAGER"] = "strict"

import torch
import torch_pjrt

# benchmarks/ is not a package; running this file puts its folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import DEFAULT_OUT, fmt, machine_facts, machine_tag
from _common import plugin_facts, write_results

SCHEMA = "torch-pjrt/eager-ops-bench/2"
DEVICE = torch_pjrt.settings().device_name

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OPS: dict[str, Op] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "sum": lambda a, b: a.sum(),
    "mm": lambda a, b: a @ b,
    "cat": lambda a, b: torch.cat((a, b), 0),
}
SIZES: dict[str, tuple[int, int]] = {"small": (64, 64), "medium": (1024, 1024)}
# tpu_sync: synchronize() after every op; tpu_fused: fused eager, every op's
# result kept and produced, in pending graphs of FUSED_CHUNK ops. The calls of
# a batch are identical, and XLA computes identical expressions once, so the
# fused figure is taken at the small size only, where it is the host's cost
# of recording an op plus 1/64 of a program launch.
MODES = ("cpu", "tpu", "tpu_sync", "tpu_fused")
FUSED_CHUNK = 64

CALIBRATION_S = 0.02  # grow N until one batch takes at least this long, then scale
WARMUP_CALLS = 3


@dataclass
class Measurement:
    calls_per_batch: int
    batch_us_per_op: list[float]

    @property
    def median_us(self) -> float:
        return statistics.median(self.batch_us_per_op)

    def as_dict(self) -> dict[str, Any]:
        samples = self.batch_us_per_op
        return {
            "median_us": round(self.median_us, 3),
            "min_us": round(min(samples), 3),
            "max_us": round(max(samples), 3),
            "calls_per_batch": self.calls_per_batch,
            "batches": len(samples),
        }


def sync() -> None:
    torch.tpu.synchronize()


def run_batch(op: Op, a: torch.Tensor, b: torch.Tensor, n: int, mode: str) -> float:
    """Seconds for n calls; a device batch counts until its work is done."""
    on_device = mode != "cpu"
    if on_device:
        sync()  # start from an idle device
    gc.disable()
    try:
        start = time.perf_counter()
        if mode == "tpu_sync":
            for _ in range(n):
                op(a, b)
                sync()
        elif mode == "tpu_fused":
            held: list[torch.Tensor] = []  # every result held while its graph runs
            with torch_pjrt.eager_mode("fused"):
                for _ in range(n // FUSED_CHUNK):
                    held[:] = [op(a, b) for _ in range(FUSED_CHUNK)]
                    torch_pjrt.flush_pending()
            sync()
        else:
            for _ in range(n):
                op(a, b)
            if on_device:
                sync()
        return time.perf_counter() - start
    finally:
        gc.enable()


def calibrate(run: Callable[[int], float], target_s: float, step: int = 1) -> int:
    """Calls per batch (a multiple of `step`) for a batch of about target_s."""
    n = step
    while (elapsed := run(n)) < CALIBRATION_S:
        n *= 2
    return max(step, round(target_s * n / elapsed / step) * step)


def calls_per_batch(op: Op, a: torch.Tensor, b: torch.Tensor, mode: str, target_s: float) -> int:
    step = FUSED_CHUNK if mode == "tpu_fused" else 1  # fused: whole chunks, one program
    return calibrate(lambda n: run_batch(op, a, b, n, mode), target_s, step)


# The host-read round trip: a short chain of small ops whose one-element
# result is read back after every chain (.cpu() or .item()), against the same
# chain with one synchronize() per batch. The difference is what a read costs
# on top of the chain: the wait for the chain's last program and the copy back.
READS = ("none", "cpu", "item")
CHAIN_OPS = 4


def chain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return ((a + b) * b - a).sum()  # CHAIN_OPS ops


def run_chain_batch(a: torch.Tensor, b: torch.Tensor, n: int, read: str) -> float:
    on_device = a.device.type != "cpu"
    if on_device:
        sync()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(n):
            result = chain(a, b)
            if read == "cpu":
                result.cpu()
            elif read == "item":
                result.item()
        if on_device:
            sync()
        return time.perf_counter() - start
    finally:
        gc.enable()


def bench_reads(batches: int, target_s: float) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    a_cpu, b_cpu = (torch.randn(SIZES["small"], generator=gen) for _ in range(2))
    on = {"cpu": (a_cpu, b_cpu), "tpu": (a_cpu.to(DEVICE), b_cpu.to(DEVICE))}
    torch.testing.assert_close(chain(*on["tpu"]).cpu(), chain(*on["cpu"]), rtol=1e-4, atol=1e-3)
    cells = [(where, read) for where in on for read in READS]
    for where, read in cells:
        run_chain_batch(*on[where], 3, read)  # warm-up
    n = {c: calibrate(lambda k, c=c: run_chain_batch(*on[c[0]], k, c[1]), target_s) for c in cells}
    samples: dict[tuple[str, str], list[float]] = {c: [] for c in cells}
    for _ in range(batches):
        for c in cells:
            samples[c].append(run_chain_batch(*on[c[0]], n[c], c[1]) / n[c] * 1e6)
    us = {c: statistics.median(v) for c, v in samples.items()}
    return {
        "chain": f"((a + b) * b - a).sum(), {CHAIN_OPS} ops at "
                 + "x".join(map(str, SIZES["small"])),
        **{where: {read: round(us[(where, read)], 3) for read in READS} for where in on},
        "read_cost_us": {where: {read: round(us[(where, read)] - us[(where, "none")], 3)
                                 for read in READS if read != "none"} for where in on},
    }


def compile_events() -> dict[str, int]:
    """Counters that move when a program is built or loaded, or falls back to CPU."""
    m = torch_pjrt.metrics()
    return {
        "compilations": m["compilations"],
        "cache_hits_disk": m["cache_hits_disk"],
        "program_cache_misses": sum(m["recompile_reasons"].values()),
        "fallback_ops": sum(m["fallback_ops"].values()),
    }


def bench_op(name: str, shape: tuple[int, int], batches: int, target_s: float) -> dict[str, Any]:
    op = OPS[name]
    modes = MODES if shape == SIZES["small"] else tuple(m for m in MODES if m != "tpu_fused")
    gen = torch.Generator().manual_seed(0)
    a_cpu, b_cpu = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    a_dev, b_dev = a_cpu.to(DEVICE), b_cpu.to(DEVICE)
    inputs = {"cpu": (a_cpu, b_cpu), "tpu": (a_dev, b_dev), "tpu_sync": (a_dev, b_dev),
              "tpu_fused": (a_dev, b_dev)}

    # Warm-up: compiles the program, and checks it computes what CPU PyTorch does.
    for _ in range(WARMUP_CALLS):
        expected, got = op(a_cpu, b_cpu), op(a_dev, b_dev)
    sync()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-3)
    with torch_pjrt.eager_mode("fused"):
        torch.testing.assert_close(op(a_dev, b_dev).cpu(), expected, rtol=1e-4, atol=1e-3)
    run_batch(op, a_dev, b_dev, FUSED_CHUNK, "tpu_fused")  # its one program

    # Everything after warm-up counts, calibration included.
    before = compile_events()
    n = {mode: calls_per_batch(op, *inputs[mode], mode, target_s) for mode in modes}
    executions = {mode: 0 for mode in modes}
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(batches):
        for mode in modes:
            executions_before = torch_pjrt.metrics()["executions"]
            elapsed = run_batch(op, *inputs[mode], n[mode], mode)
            executions[mode] += torch_pjrt.metrics()["executions"] - executions_before
            samples[mode].append(elapsed / n[mode] * 1e6)
    after = compile_events()
    device_calls = (n["tpu"] + n["tpu_sync"]) * batches

    results = {mode: Measurement(n[mode], samples[mode]) for mode in modes}
    fused = results.get("tpu_fused")
    cpu_us = results["cpu"].median_us
    return {
        "op": name,
        "size": "x".join(map(str, shape)),
        "tpu_over_cpu": round(results["tpu"].median_us / cpu_us, 3),
        "tpu_sync_over_cpu": round(results["tpu_sync"].median_us / cpu_us, 3),
        "tpu_fused_over_cpu": round(fused.median_us / cpu_us, 3) if fused else None,
        **{mode: results[mode].as_dict() if mode in results else None for mode in MODES},
        "after_warmup": {
            **{key: after[key] - before[key] for key in before},
            "executions_per_call": round((executions["tpu"] + executions["tpu_sync"])
                                         / device_calls, 3),
            "fused_executions_per_call": (round(executions["tpu_fused"]
                                                / (n["tpu_fused"] * batches), 4)
                                          if fused else None),
        },
    }


def runtime_reference(out_dir: Path, tag: str) -> dict[str, Any] | None:
    """The newest runtime-*.json, preferring one from this machine."""
    records = []
    for path in out_dir.glob("runtime-*.json"):
        try:
            record = json.loads(path.read_text())
            launch_us = record["launch"]["execute_await_us"]["median"]
            their_tag = machine_tag(record["machine"], record["plugin"].get("platform_name"))
        except (OSError, ValueError, KeyError):
            continue
        same = their_tag == tag
        records.append((same, record.get("date", ""), path.name, launch_us))
    if not records:
        return None
    same, date, name, launch_us = max(records)
    return {
        "file": name,
        "date": date,
        "launch_await_median_us": launch_us,
        "same_machine": same,
    }


def overheads(ops: list[dict[str, Any]], reference: dict[str, Any] | None) -> list[dict]:
    if reference is None:
        return []
    launch_us = reference["launch_await_median_us"]
    return [
        {
            "op": r["op"],
            "tpu_sync_us": r["tpu_sync"]["median_us"],
            "pjrt_launch_await_us": launch_us,
            "overhead_us": round(r["tpu_sync"]["median_us"] - launch_us, 3),
        }
        for r in ops
        if r["size"] == "x".join(map(str, SIZES["small"]))
    ]


def fused_cell(r: dict[str, Any], what: str) -> str:
    if r["tpu_fused"] is None:
        return "n/a"
    return f"{fmt(r['tpu_fused_over_cpu'])}x" if what == "ratio" else fmt(r["tpu_fused"]["median_us"])


def markdown(record: dict[str, Any]) -> str:
    machine, checks = record["machine"], record["checks"]
    header = (
        f"# Eager op benchmark, {record['date']}\n\n"
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; plugin {machine['plugin']} (PJRT C API "
        f"{machine['pjrt_api_version']}); torch {record['torch']['version']} with "
        f"{record['torch']['threads']} threads; eager mode {record['eager']}. float32; "
        f"each time is the median per op over {record['config']['batches']} batches of "
        f'~{record["config"]["target_batch_ms"]:.0f} ms. "tpu" synchronizes once per batch, '
        f'"tpu+sync" after every op; "fused" is fused eager with every result kept, run as '
        f"one program per {FUSED_CHUNK} ops (small size only: XLA computes the batch's "
        f"identical calls once, so at a large size it would measure that).\n\n"
    )
    table = [
        "| Op | Size | tpu / CPU | tpu+sync / CPU | fused / CPU | CPU µs | tpu µs | tpu+sync µs "
        "| fused µs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["ops"]:
        table.append(
            f"| {r['op']} | {r['size']} | {fmt(r['tpu_over_cpu'])}x "
            f"| {fmt(r['tpu_sync_over_cpu'])}x | {fused_cell(r, 'ratio')} "
            f"| {fmt(r['cpu']['median_us'])} "
            f"| {fmt(r['tpu']['median_us'])} | {fmt(r['tpu_sync']['median_us'])} "
            f"| {fused_cell(r, 'us')} |"
        )

    reference = record["runtime_reference"]
    if reference is None:
        overhead = (
            "\n## Overhead per op on a cache hit\n\n"
            "No runtime-*.json in benchmarks/results/: run benchmarks/runtime.py to get the "
            "PJRT launch latency this is derived from.\n"
        )
    else:
        machine_note = "" if reference["same_machine"] else " (from a different machine)"
        overhead = (
            "\n## Overhead per op on a cache hit (derived across two runs)\n\n"
            f"tpu+sync time per op at 64x64 from this run, minus the PJRT launch + await "
            f"median of {reference['file']}{machine_note}, a separate run of "
            f"benchmarks/runtime.py (program f32[4] + f32[4]). The difference also holds XLA's "
            f"own work for a 64x64 program (compute and, on the CPU plugin, any hand-off to "
            f"its thread pool), so it is an upper bound on this backend's overhead.\n\n"
            "| Op | tpu+sync µs | PJRT launch + await µs | Overhead µs |\n"
            "| --- | --- | --- | --- |\n"
        )
        overhead += "".join(
            f"| {o['op']} | {fmt(o['tpu_sync_us'])} | {fmt(o['pjrt_launch_await_us'])} "
            f"| {fmt(o['overhead_us'])} |\n"
            for o in record["overheads"]
        )

    check = (
        f"\nTimed loops after warm-up: {checks['compilations']} compilations, "
        f"{checks['cache_hits_disk']} disk cache hits, {checks['program_cache_misses']} "
        f"program cache misses, {checks['fallback_ops']} fallback ops; "
        f"executions per tpu call: {checks['executions_per_call']}; per fused call: "
        f"{checks['fused_executions_per_call']}.\n"
    )
    reads = record["reads"]
    cost = reads["read_cost_us"]
    read_table = (
        "\n## Host read round trip\n\n"
        f"A chain {reads['chain']}, its one-element result read after every chain, against "
        "the chain alone (one synchronize() per batch). µs per chain; the read's cost is the "
        "difference (target on tpu: at most 10 µs).\n\n"
        "| where | chain µs | chain + .cpu() µs | chain + .item() µs | .cpu() costs µs "
        "| .item() costs µs |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
        + "".join(f"| {w} | {fmt(reads[w]['none'])} | {fmt(reads[w]['cpu'])} "
                  f"| {fmt(reads[w]['item'])} | {fmt(cost[w]['cpu'])} | {fmt(cost[w]['item'])} |\n"
                  for w in ("cpu", "tpu"))
    )
    return header + "\n".join(table) + "\n" + overhead + read_table + check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--batches", type=int, default=7, help="timed batches per figure")
    parser.add_argument("--batch-ms", type=float, default=100, help="target time of one batch")
    args = parser.parse_args()

    started = time.perf_counter()
    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    tag = machine_tag(machine, plugin["platform_name"])
    date = datetime.date.today().isoformat()

    ops: list[dict[str, Any]] = []
    for size in SIZES.values():
        for name in OPS:
            r = bench_op(name, size, args.batches, args.batch_ms / 1e3)
            ops.append(r)
            print(
                f"{name:>4} {r['size']:>9}: tpu/CPU {r['tpu_over_cpu']:7.3g}x, "
                f"tpu+sync/CPU {r['tpu_sync_over_cpu']:7.3g}x  (CPU "
                f"{r['cpu']['median_us']:.4g} µs, tpu {r['tpu']['median_us']:.4g} µs, "
                f"tpu+sync {r['tpu_sync']['median_us']:.4g} µs, "
                f"fused {fused_cell(r, 'us')} µs)",
                flush=True,
            )

    reads = bench_reads(args.batches, args.batch_ms / 1e3)
    print(f"host read after a {CHAIN_OPS}-op chain on tpu: .cpu() +"
          f"{reads['read_cost_us']['tpu']['cpu']:.3g} µs, .item() +"
          f"{reads['read_cost_us']['tpu']['item']:.3g} µs", flush=True)

    counted = ("compilations", "cache_hits_disk", "program_cache_misses", "fallback_ops")
    checks: dict[str, Any] = {key: sum(r["after_warmup"][key] for r in ops) for key in counted}
    per_call = {r["after_warmup"]["executions_per_call"] for r in ops}
    checks["executions_per_call"] = per_call.pop() if len(per_call) == 1 else sorted(per_call)
    fused_per_call = {r["after_warmup"]["fused_executions_per_call"] for r in ops
                      if r["after_warmup"]["fused_executions_per_call"] is not None}
    checks["fused_executions_per_call"] = (fused_per_call.pop() if len(fused_per_call) == 1
                                           else sorted(fused_per_call))
    checks["zero_compilations"] = checks["compilations"] + checks["cache_hits_disk"] == 0
    checks["zero_fallbacks"] = checks["fallback_ops"] == 0
    reference = runtime_reference(args.out_dir, tag)
    record = {
        "schema": SCHEMA,
        "date": date,
        "machine": machine,
        "plugin": plugin,
        "torch": {"version": torch.__version__, "threads": torch.get_num_threads()},
        "eager": torch_pjrt.settings().eager,
        "config": {
            "batches": args.batches,
            "target_batch_ms": args.batch_ms,
            "warmup_calls": WARMUP_CALLS,
            "dtype": "float32",
        },
        "ops": ops,
        "runtime_reference": reference,
        "overheads": overheads(ops, reference),
        "reads": reads,
        "checks": checks,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }

    table = markdown(record)
    print("\n" + table)
    for key, ok in (("zero_compilations", "compilations"), ("zero_fallbacks", "fallback_ops")):
        state = "OK" if checks[key] else "FAILED"
        print(f"check {key}: {state} ({checks[ok]} {ok} after warm-up)")
    if reference is None:
        print("no runtime-*.json found: the per-op overhead is not reported")

    write_results(record, table, args.out_dir, f"eager_ops-{date}-{tag}")
    if not (checks["zero_compilations"] and checks["zero_fallbacks"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
