"""A DataLoader-fed training loop on the tpu device, with and without pinned memory.

    python benchmarks/dataloader_feed.py

A small CNN trains on batches of 64 images (3x64x64 float32, 3 MiB each)
from a DataLoader. The baseline loader gives plain memory and the loop
copies each batch with a blocking `.to("tpu")`; the other gives pinned memory
(`pin_memory=True`) and the loop copies with `non_blocking=True`, which
returns at once and lets the copy overlap the programs still running.
Both run in the same process, interleaved over rounds; each figure is the
median. Reported per step: the step time, and the time the loop spent inside
the `.to()` calls (what the overlap removes from the host's critical path).
Results go to benchmarks/results/dataloader_feed-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_feed_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name

import torch
import torch_pjrt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import DEFAULT_OUT, fmt, machine_facts, machine_tag
from _common import plugin_facts, write_results

SCHEMA = "torch-pjrt/dataloader-feed-bench/1"
DEVICE = torch_pjrt.settings().device_name
BATCH = 64
BATCHES = 16


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).to(DEVICE)


def epoch(loader, model, opt, non_blocking: bool) -> tuple[float, float, list[float]]:
    """Seconds per step, seconds per step inside .to(), and the losses."""
    losses, copy_s = [], 0.0
    start = time.perf_counter()
    for x, y in loader:
        t = time.perf_counter()
        x, y = x.to(DEVICE, non_blocking=non_blocking), y.to(DEVICE, non_blocking=non_blocking)
        copy_s += time.perf_counter() - t
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    getattr(torch, DEVICE).synchronize()
    steps = len(losses)
    return (time.perf_counter() - start) / steps, copy_s / steps, [float(v) for v in losses]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * BATCHES, 3, 64, 64, generator=g),
                                          torch.randint(0, 10, (BATCH * BATCHES,), generator=g))
    ways = {"plain": (False, False), "pinned_non_blocking": (True, True)}
    loaders = {name: torch.utils.data.DataLoader(data, batch_size=BATCH, pin_memory=pin)
               for name, (pin, _) in ways.items()}
    runs: dict[str, dict[str, Any]] = {}
    for name, (_, non_blocking) in ways.items():
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        epoch(loaders[name], model, opt, non_blocking)  # warm-up: compiles every program
        runs[name] = {"model": model, "opt": opt, "step": [], "copy": []}
    losses = {}
    for _ in range(args.rounds):
        for name, (_, non_blocking) in ways.items():
            r = runs[name]
            step_s, copy_s, losses[name] = epoch(loaders[name], r["model"], r["opt"], non_blocking)
            r["step"].append(step_s * 1e3)
            r["copy"].append(copy_s * 1e3)
    # Same data, same start, same steps: the two loops train alike.
    torch.testing.assert_close(losses["pinned_non_blocking"], losses["plain"], rtol=1e-5, atol=1e-6)

    results = {name: {"step_ms": round(statistics.median(r["step"]), 3),
                      "copy_ms": round(statistics.median(r["copy"]), 3),
                      "step_ms_samples": [round(v, 3) for v in r["step"]],
                      "copy_ms_samples": [round(v, 3) for v in r["copy"]]}
               for name, r in runs.items()}
    base, pinned = results["plain"], results["pinned_non_blocking"]
    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    date = datetime.date.today().isoformat()
    record = {
        "schema": SCHEMA, "date": date, "machine": machine, "plugin": plugin,
        "torch": torch.__version__, "eager": torch_pjrt.get_eager_mode(),
        "config": {"batch": BATCH, "batches_per_epoch": BATCHES, "rounds": args.rounds,
                   "image": [3, 64, 64]},
        "results": results,
        "pinned_speedup": round(base["step_ms"] / pinned["step_ms"], 3),
        "copy_time_ratio": round(pinned["copy_ms"] / base["copy_ms"], 3),
    }
    table = (
        f"# DataLoader-fed training, {date}\n\n"
        f"{machine['cpu_model']}, {machine['cores']} cores; plugin {machine['plugin']}; torch "
        f"{torch.__version__}; {record['eager']} eager. A CNN on batches of {BATCH} 3x64x64 "
        f"images, {BATCHES} steps per epoch; medians over {args.rounds} interleaved epochs.\n\n"
        "| loader and copy | step ms | of which in .to() ms | step speed vs plain |\n"
        "| --- | ---: | ---: | ---: |\n"
        f"| plain memory, blocking .to() | {fmt(base['step_ms'])} | {fmt(base['copy_ms'])} | 1x |\n"
        f"| pin_memory=True, .to(non_blocking=True) | {fmt(pinned['step_ms'])} | "
        f"{fmt(pinned['copy_ms'])} | {fmt(record['pinned_speedup'])}x |\n"
    )
    print(table)
    write_results(record, table, args.out_dir,
                  f"dataloader_feed-{date}-{machine_tag(machine, plugin['platform_name'])}")


if __name__ == "__main__":
    main()
