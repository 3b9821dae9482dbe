"""Times full training steps of three small models on CPU PyTorch and on the tpu device.

    python benchmarks/train_small.py

The models are those of tests/test_training.py: an MLP on a synthetic
regression task (mse_loss), a small CNN with convolutions, batch norm and
pooling (cross_entropy), and a small transformer encoder built on
nn.TransformerEncoderLayer (cross_entropy). One step is zero_grad, forward,
loss, backward, clip_grad_norm_(1.0), AdamW(foreach=True).step() and
CosineAnnealingLR.step(), so the learning rate changes every step.

Each model runs in a fresh child process with its own empty compile cache (a
temporary folder, so the user's cache is neither read nor written), so its
first step pays the whole compile cost, as it would in a user's first run. In
that process CPU PyTorch and the tpu device (strict eager) take the same
steps from the same seed: the first step is timed alone, then warm-up steps,
then timed batches of N steps, N chosen so that a batch takes ~--batch-ms. A
tpu batch ends with torch.tpu.synchronize(); the batches of the modes are
interleaved so that drift in the machine's speed hits them alike. Steps/s is
N over the median batch time. Two more modes call loss.item() after every
step (a training loop that logs its loss), on CPU and on tpu.

On a small machine other processes distort the CPU figures most (CPU
PyTorch's OpenMP threads wait on each other when one loses its core): before
each model the script waits (--quiet-wait) for the machine to go quiet, and it
records the CPU time other processes took during each mode's batches.

After warm-up no program may be compiled or loaded from the disk cache and no
op may fall back to CPU; the script exits with status 1 otherwise. Results go
to benchmarks/results/train_small-<date>-<machine>.{json,md}, with no host
name and no absolute path.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before torch_pjrt is imported: it reads its settings once, at import.
_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_train_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name
os.environ["TORCH_PJRT_EAGER"] = "strict"

import torch
import torch_pjrt

# benchmarks/ is not a package; running this file puts its folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import DEFAULT_OUT, REPO, fmt, machine_facts, machine_tag
from _common import plugin_facts, system_busy_s, wait_for_quiet, write_results

sys.path.insert(0, str(REPO / "tests"))
import test_training as t

SCHEMA = "torch-pjrt/train-small-bench/1"
DEVICE = torch_pjrt.settings().device_name
F = torch.nn.functional

Data = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Model:
    make: Callable[[], torch.nn.Module]
    data: Callable[[], Data]
    loss: LossFn
    description: str


MODELS: dict[str, Model] = {
    "mlp": Model(t.mlp, t.regression_data, F.mse_loss, "MLP 12-32-32-1, batch 64, mse"),
    "cnn": Model(t.cnn, t.image_data, F.cross_entropy, "CNN 2 conv+BN, 8x3x12x12, CE"),
    "encoder": Model(
        t.encoder, t.sequence_data, F.cross_entropy, "TransformerEncoderLayer, 8x6x16"
    ),
}
OPTIMIZER = "adamw_foreach"  # AdamW(lr=1e-2, foreach=True, weight_decay=0.1)
T_MAX = 10_000  # longer than any run: the learning rate changes on every step
# cpu/tpu: one synchronize() per batch on tpu; *_item: loss.item() after every step.
MODES = ("cpu", "tpu", "cpu_item", "tpu_item")
CALIBRATION_S = 0.02  # grow N until one batch takes at least this long, then scale
COUNTERS = (
    "compilations",
    "cache_hits_disk",
    "cache_hits_memory",
    "executions",
    "host_syncs",
    "host_to_device_bytes",
    "device_to_host_bytes",
)


def sync() -> None:
    torch.tpu.synchronize()


class Trainer:
    """One model, its optimizer and scheduler on one device."""

    def __init__(self, model: Model, device: str) -> None:
        self.device = device
        torch.manual_seed(0)  # the same initial weights on both devices
        self.module = model.make().to(device)
        self.params = list(self.module.parameters())
        self.opt = t.OPTIMIZERS[OPTIMIZER](self.params)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=T_MAX)
        self.x, self.y = (v.to(device) for v in model.data())
        self.loss_fn = model.loss

    def step(self) -> torch.Tensor:
        self.opt.zero_grad()
        loss = self.loss_fn(self.module(self.x), self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.sched.step()
        return loss

    def timed_step(self) -> tuple[float, torch.Tensor]:
        """(seconds until the step's work is done, its loss)."""
        on_device = self.device != "cpu"
        start = time.perf_counter()
        loss = self.step()
        if on_device:
            sync()
        return time.perf_counter() - start, loss

    def run_batch(self, n: int, item: bool) -> float:
        """Seconds for n steps; a device batch counts until its work is done."""
        on_device = self.device != "cpu"
        if on_device:
            sync()  # start from an idle device
        gc.disable()
        try:
            start = time.perf_counter()
            if item:
                for _ in range(n):
                    self.step().item()
            else:
                for _ in range(n):
                    self.step()
            if on_device:
                sync()
            return time.perf_counter() - start
        finally:
            gc.enable()


def counters() -> dict[str, int]:
    m = torch_pjrt.metrics()
    return {key: m[key] for key in COUNTERS}


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def steps_per_batch(trainer: Trainer, item: bool, target_s: float) -> int:
    n = 1
    while (elapsed := trainer.run_batch(n, item)) < CALIBRATION_S:
        n *= 2
    return max(1, round(target_s * n / elapsed))


def prelude() -> None:
    """Pays the process's one-time costs (autograd engine, first device launch)
    before any first step is timed; shares no program shape with the models."""
    w = torch.randn(5, 7, requires_grad=True)
    (w * 2).sum().backward()
    a = torch.ones(3, device=DEVICE)
    (a + 1).cpu()
    sync()


def bench_model(name: str, warmup: int, batches: int, target_s: float) -> dict[str, Any]:
    model = MODELS[name]
    prelude()
    torch_pjrt.reset_metrics()
    trainers = {"cpu": Trainer(model, "cpu"), "tpu": Trainer(model, DEVICE)}

    # First step and warm-up, CPU then tpu; losses are compared afterwards.
    first: dict[str, Any] = {}
    warm_ms: dict[str, list[float]] = {}
    losses: dict[str, list[float]] = {}
    for dev, trainer in trainers.items():
        before = counters()
        elapsed, loss = trainer.timed_step()
        first[dev] = {"ms": round(elapsed * 1e3, 3), "counters": diff(counters(), before)}
        warm_ms[dev], losses[dev] = [], [loss.item()]  # read after the counters
        for _ in range(warmup - 1):
            elapsed, loss = trainer.timed_step()
            warm_ms[dev].append(round(elapsed * 1e3, 3))
            losses[dev].append(loss.item())
    warmup_metrics = torch_pjrt.metrics()
    loss_diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses["tpu"], losses["cpu"]))

    # Everything after warm-up counts, calibration included.
    before_all = counters()
    fallbacks_before = dict(warmup_metrics["fallback_ops"])
    reasons_before = dict(warmup_metrics["recompile_reasons"])
    compile_s_before = warmup_metrics["compile_seconds"]
    n = {
        mode: steps_per_batch(trainers[mode.split("_")[0]], mode.endswith("_item"), target_s)
        for mode in MODES
    }
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    per_mode = {mode: dict.fromkeys(COUNTERS, 0) for mode in MODES}
    # CPU time other processes took while a mode ran, in cores: a busy machine
    # slows CPU PyTorch's two OpenMP threads far more than it slows the device.
    other_s = dict.fromkeys(MODES, 0.0)
    for i in range(batches):
        # Rotate the order, so no mode always runs right after the same other.
        for mode in MODES[i % len(MODES) :] + MODES[: i % len(MODES)]:
            trainer = trainers[mode.split("_")[0]]
            before = counters()
            busy, own = system_busy_s(), time.process_time()
            elapsed = trainer.run_batch(n[mode], mode.endswith("_item"))
            other_s[mode] += (system_busy_s() - busy) - (time.process_time() - own)
            for key, value in diff(counters(), before).items():
                per_mode[mode][key] += value
            samples[mode].append(elapsed)
    after = torch_pjrt.metrics()
    after_warmup = diff(counters(), before_all)
    new_reasons = {
        reason: count - reasons_before.get(reason, 0)
        for reason, count in after["recompile_reasons"].items()
        if count != reasons_before.get(reason, 0)
    }
    new_fallbacks = {
        op: count - fallbacks_before.get(op, 0)
        for op, count in after["fallback_ops"].items()
        if count != fallbacks_before.get(op, 0)
    }

    modes: dict[str, Any] = {}
    for mode in MODES:
        batch_s = statistics.median(samples[mode])
        per_step_ms = [s / n[mode] * 1e3 for s in samples[mode]]
        entry: dict[str, Any] = {
            "steps_per_s": round(n[mode] / batch_s, 2),
            "ms_per_step": round(batch_s / n[mode] * 1e3, 4),
            "ms_per_step_min": round(min(per_step_ms), 4),
            "ms_per_step_max": round(max(per_step_ms), 4),
            "steps_per_batch": n[mode],
            "batches": len(samples[mode]),
            "other_processes_cores": round(max(0.0, other_s[mode]) / sum(samples[mode]), 3),
        }
        if mode.startswith("tpu"):
            steps = n[mode] * batches
            entry["per_step"] = {
                key: round(per_mode[mode][key] / steps, 3)
                for key in (
                    "executions",
                    "host_syncs",
                    "host_to_device_bytes",
                    "device_to_host_bytes",
                )
            }
        modes[mode] = entry

    def ratios(tpu: str, cpu: str) -> dict[str, float]:
        return {
            "time_per_step_tpu_over_cpu": round(
                modes[tpu]["ms_per_step"] / modes[cpu]["ms_per_step"], 3
            ),
            "steps_per_s_tpu_over_cpu": round(
                modes[tpu]["steps_per_s"] / modes[cpu]["steps_per_s"], 3
            ),
        }

    return {
        "model": name,
        "description": model.description,
        "parameters": sum(p.numel() for p in trainers["cpu"].params),
        "ratios": ratios("tpu", "cpu"),
        "ratios_with_item": ratios("tpu_item", "cpu_item"),
        "first_step": {
            **first,
            "tpu_over_cpu": round(first["tpu"]["ms"] / first["cpu"]["ms"], 1),
            "warmup_ms": warm_ms,
        },
        "warmup": {
            "steps": warmup,
            "compilations": warmup_metrics["compilations"],
            "compile_seconds": round(warmup_metrics["compile_seconds"], 3),
            "program_cache_misses": sum(reasons_before.values()),
            "recompile_reasons": reasons_before,
            "max_relative_loss_difference_tpu_vs_cpu": loss_diff,
        },
        **modes,
        "after_warmup": {
            "compilations": after_warmup["compilations"],
            "cache_hits_disk": after_warmup["cache_hits_disk"],
            "compile_seconds": round(after["compile_seconds"] - compile_s_before, 3),
            "recompile_reasons": new_reasons,
            "fallback_ops": new_fallbacks,
            "fallback_ops_whole_run": after["fallback_ops"],
        },
    }


def run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """bench_model in a fresh process: a cold compile cache, no programs shared."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        f"--warmup={args.warmup}",
        f"--batches={args.batches}",
        f"--batch-ms={args.batch_ms}",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-30:])
        raise SystemExit(f"{name}: child failed with exit code {proc.returncode}:\n{tail}")
    return json.loads(proc.stdout.splitlines()[-1])


def markdown(record: dict[str, Any]) -> str:
    machine, config = record["machine"], record["config"]
    header = (
        f"# Small-model training benchmark, {record['date']}\n\n"
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; plugin {machine['plugin']} (PJRT C API "
        f"{machine['pjrt_api_version']}); torch {record['torch']['version']} with "
        f"{record['torch']['threads']} threads; eager mode {record['eager']}. "
        f"One step: zero_grad, forward, loss, backward, clip_grad_norm_(1.0), "
        f"AdamW(foreach=True).step(), CosineAnnealingLR.step(). Each model in a fresh process "
        f"with an empty compile cache; {config['warmup']} warm-up steps, then the median of "
        f"{config['batches']} interleaved batches of ~{config['target_batch_ms']:.0f} ms; a tpu "
        f"batch ends with torch.tpu.synchronize(). Ratios are tpu over CPU: above 1x the tpu "
        f"device takes longer per step (time) or does more steps per second (steps/s).\n\n"
    )
    table = [
        (
            "| Model | Time/step tpu/CPU | Steps/s tpu/CPU "
            "| With .item() every step: time/step (steps/s) tpu/CPU | First step time tpu/CPU "
            "| CPU steps/s | tpu steps/s | CPU ms/step | tpu ms/step | First step ms CPU / tpu |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["models"]:
        fs = r["first_step"]
        table.append(
            f"| {r['model']} | {fmt(r['ratios']['time_per_step_tpu_over_cpu'])}x "
            f"| {fmt(r['ratios']['steps_per_s_tpu_over_cpu'])}x "
            f"| {fmt(r['ratios_with_item']['time_per_step_tpu_over_cpu'])}x "
            f"({fmt(r['ratios_with_item']['steps_per_s_tpu_over_cpu'])}x) "
            f"| {fmt(fs['tpu_over_cpu'])}x | {fmt(r['cpu']['steps_per_s'])} "
            f"| {fmt(r['tpu']['steps_per_s'])} | {fmt(r['cpu']['ms_per_step'])} "
            f"| {fmt(r['tpu']['ms_per_step'])} | {fmt(fs['cpu']['ms'])} / {fmt(fs['tpu']['ms'])} |"
        )

    checks = [
        "\n## After warm-up (timed steps, calibration included)\n",
        (
            "| Model | Compilations + disk hits | Fallback ops "
            "| Host syncs/step (tpu / tpu with .item()) | Programs run/step | H2D bytes/step "
            "| Compilations in step 1 / in warm-up | Warm-up max rel. loss diff tpu vs CPU "
            "| Other processes' load, cores (CPU / tpu batches) |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["models"]:
        aw, tpu, item = r["after_warmup"], r["tpu"]["per_step"], r["tpu_item"]["per_step"]
        fallbacks = aw["fallback_ops"] or "{}"
        checks.append(
            f"| {r['model']} | {aw['compilations'] + aw['cache_hits_disk']} | {fallbacks} "
            f"| {fmt(tpu['host_syncs'])} / {fmt(item['host_syncs'])} "
            f"| {fmt(tpu['executions'])} | {fmt(tpu['host_to_device_bytes'])} "
            f"| {r['first_step']['tpu']['counters']['compilations']} / "
            f"{r['warmup']['compilations']} "
            f"| {r['warmup']['max_relative_loss_difference_tpu_vs_cpu']:.2g} "
            f"| {fmt(r['cpu']['other_processes_cores'])} / "
            f"{fmt(r['tpu']['other_processes_cores'])} |"
        )
    load = max(r[mode]["other_processes_cores"] for r in record["models"] for mode in MODES)
    if load > 0.1:
        checks.append(
            f"\nOther processes used up to {fmt(load)} cores during timed batches: the "
            f"times, the CPU ones above all, are less reliable than on an idle machine."
        )
    state = "OK" if record["checks"]["ok"] else "FAILED"
    checks.append(f"\nCheck (no compilation, no fallback after warm-up): {state}.\n")
    return header + "\n".join(table) + "\n" + "\n".join(checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps, the first included")
    parser.add_argument("--batches", type=int, default=15, help="timed batches per mode")
    parser.add_argument("--batch-ms", type=float, default=200, help="target time of one batch")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60,
        help="seconds to wait before each model for other processes to go quiet",
    )
    parser.add_argument("--child", choices=list(MODELS), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        result = bench_model(args.child, args.warmup, args.batches, args.batch_ms / 1e3)
        print(json.dumps(result))
        return

    started = time.perf_counter()
    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    tag = machine_tag(machine, plugin["platform_name"])
    date = datetime.date.today().isoformat()

    models: list[dict[str, Any]] = []
    for name in args.models.split(","):
        load_before = wait_for_quiet(args.quiet_wait)
        if load_before >= 0.25:
            print(f"{name:>8}: other processes still use {load_before} cores; running anyway")
        r = run_child(name, args)
        r["other_processes_cores_before"] = load_before
        models.append(r)
        ratio, with_item = r["ratios"], r["ratios_with_item"]
        print(
            f"{name:>8}: time/step tpu/CPU {ratio['time_per_step_tpu_over_cpu']:.3g}x "
            f"(steps/s tpu/CPU {ratio['steps_per_s_tpu_over_cpu']:.3g}x; with .item() "
            f"{with_item['time_per_step_tpu_over_cpu']:.3g}x); CPU {r['cpu']['ms_per_step']:.3g} "
            f"ms, tpu {r['tpu']['ms_per_step']:.3g} ms; first step CPU "
            f"{r['first_step']['cpu']['ms']:.4g} ms, tpu {r['first_step']['tpu']['ms']:.4g} ms; "
            f"after warm-up {r['after_warmup']['compilations']} compilations, fallbacks "
            f"{r['after_warmup']['fallback_ops']}",
            flush=True,
        )

    compiled = {
        r["model"]: r["after_warmup"]["compilations"] + r["after_warmup"]["cache_hits_disk"]
        for r in models
    }
    fallbacks = {r["model"]: r["after_warmup"]["fallback_ops"] for r in models}
    checks = {
        "compilations_after_warmup": compiled,
        "fallback_ops_after_warmup": fallbacks,
        "zero_compilations": not any(compiled.values()),
        "zero_fallbacks": not any(fallbacks.values()),
    }
    checks["ok"] = checks["zero_compilations"] and checks["zero_fallbacks"]
    record = {
        "schema": SCHEMA,
        "date": date,
        "machine": machine,
        "plugin": plugin,
        "torch": {"version": torch.__version__, "threads": torch.get_num_threads()},
        "eager": torch_pjrt.settings().eager,
        "config": {
            "optimizer": "AdamW(lr=1e-2, foreach=True, weight_decay=0.1)",
            "scheduler": f"CosineAnnealingLR(T_max={T_MAX})",
            "warmup": args.warmup,
            "batches": args.batches,
            "target_batch_ms": args.batch_ms,
            "quiet_wait_s": args.quiet_wait,
            "dtype": "float32",
        },
        "models": models,
        "checks": checks,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }

    table = markdown(record)
    print("\n" + table)
    write_results(record, table, args.out_dir, f"train_small-{date}-{tag}")
    if not checks["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
