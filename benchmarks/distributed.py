"""torch.distributed on tpu, as ratios against gloo on CPU tensors in the
same run: collective latency and bus bandwidth (as nccl-tests defines it)
for 4 KiB to 64 MiB, and DDP / FSDP2 tiny-Llama step times at 1, 2 and 4
ranks with the per-rank batch fixed.

    python benchmarks/distributed.py [--quick] [--ranks 2]

Collectives run three ways, each in fresh processes:
  xla   ranks as threads of one process, one CPU-plugin device each: XLA
        collective programs (torch_pjrt.distributed.run_threads)
  host  ranks as processes under torchrun, tpu tensors: the host transport
        (device -> host -> gloo -> device)
  gloo  ranks as processes under torchrun, CPU tensors, the gloo backend:
        the baseline
Bus bandwidth: algbw = bytes / time with bytes the full buffer (the output
of all_gather, the input of reduce_scatter); busbw = algbw * 2(n-1)/n for
all_reduce and * (n-1)/n for all_gather and reduce_scatter.
Results: benchmarks/results/distributed-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = {"4KiB": 4 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20, "64MiB": 64 << 20}
QUICK_SIZES = ("4KiB", "1MiB", "16MiB")
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}


# --- workers (run in the ranks) -----------------------------------------------------------


def sweep(rank: int, world: int, device: str, sizes: list[str], batches: int) -> dict[str, Any]:
    """Median seconds per call of each collective at each size (rank 0's clock)."""
    import torch
    import torch.distributed as dist

    dev = torch.device(device, rank) if device != "cpu" else torch.device("cpu")

    def sync():
        if device != "cpu":
            torch.tpu.synchronize()
        dist.barrier()

    out: dict[str, Any] = {}
    for name in OPS:
        for label in sizes:
            nbytes = SIZES[label]
            n = nbytes // 4  # float32 elements of the full buffer
            if name == "all_reduce":
                x = torch.zeros(n, device=dev)
                call = lambda: dist.all_reduce(x)  # noqa: E731
            elif name == "all_gather":
                x, y = torch.zeros(n // world, device=dev), torch.zeros(n, device=dev)
                call = lambda: dist.all_gather_into_tensor(y, x)  # noqa: E731
            else:
                x, y = torch.zeros(n, device=dev), torch.zeros(n // world, device=dev)
                call = lambda: dist.reduce_scatter_tensor(y, x)  # noqa: E731
            for _ in range(2):  # warm-up: connections, program compilation
                call()
            sync()
            # Calls per batch: about 0.1 s of work, at least one.
            start = time.perf_counter()
            call()
            sync()
            once = time.perf_counter() - start
            # Every rank must make the same number of calls: rank 0's count.
            count = torch.tensor([max(1, min(50, int(0.1 / max(once, 1e-6))))], device=dev)
            dist.broadcast(count, src=0)
            per_batch = int(count.item())
            times = []
            for _ in range(batches):
                sync()
                start = time.perf_counter()
                for _ in range(per_batch):
                    call()
                sync()
                times.append((time.perf_counter() - start) / per_batch)
            out[f"{name}/{label}"] = statistics.median(times)
    return out


def train_steps(rank: int, world: int, parallel: str, steps: int) -> dict[str, Any]:
    """Median seconds per tiny-Llama training step (per-rank batch 4 x 32)."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(HERE.parent / "tests" / "distributed"))
    import workload

    dev = torch.device("tpu", rank)
    model = workload.tiny_llama().to(dev)
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, workload.VOCAB, (4, 32), generator=torch.Generator().manual_seed(rank)).to(dev)
    times = []
    for step in range(steps):
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    import torch_pjrt

    return {"step_s": statistics.median(times[2:]), "late_compiles": None,
            "compilations": torch_pjrt.metrics()["compilations"]}


def worker_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.backend == "gloo":
        dist.init_process_group("gloo")
        result = sweep(rank, world, "cpu", args.sizes.split(","), args.batches)
    else:
        import torch_pjrt  # noqa: F401

        torch.tpu.set_device(rank)
        dist.init_process_group("tpu", device_id=torch.device("tpu", rank))
        if args.task == "sweep":
            result = sweep(rank, world, "tpu", args.sizes.split(","), args.batches)
        else:
            result = train_steps(rank, world, args.task, args.steps)
        result["transport"] = torch_pjrt.distributed.transport()
    if rank == 0:
        Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()


def threads_main(args: argparse.Namespace) -> None:
    import torch_pjrt
    from torch_pjrt.distributed import run_threads, transport

    def body(rank):
        r = sweep(rank, args.world, "tpu", args.sizes.split(","), args.batches)
        r["transport"] = transport()
        return r

    results = run_threads(body, args.world)
    results[0]["compilations"] = torch_pjrt.metrics()["compilations"]
    Path(args.out).write_text(json.dumps(results[0]))


# --- the driver ---------------------------------------------------------------------------


def launch(ranks: int, extra: list[str], threads: bool = False, timeout: float = 1800) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        env = dict(os.environ, TORCH_PJRT_CPU_DEVICES=str(ranks), OMP_NUM_THREADS="1")
        me = [str(Path(__file__).resolve())]
        if threads:
            cmd = [sys.executable, *me, "--threads-worker", "--world", str(ranks), "--out", out, *extra]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                   str(ranks), *me, "--worker", "--out", out, *extra]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out):
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(out).read_text())


def busbw(op: str, label: str, seconds: float, n: int) -> float:
    return SIZES[label] / seconds * BUS_FACTOR[op](n) / 1e9


def markdown(record: dict[str, Any]) -> str:
    m, n = record["machine"], record["ranks"]
    lines = [
        f"# torch.distributed on tpu: {record['date']}",
        "",
        f"{m['cpu_model']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; plugin {m['plugin']} "
        f"(PJRT C API {m['pjrt_api_version']}); torch {record['torch']}. {n} ranks on one machine. "
        "Baseline: gloo on CPU tensors, measured in the same run.",
        "",
        "## Collectives",
        "",
        "| op | size | gloo time | gloo busbw GB/s | xla time | xla busbw | **xla busbw / gloo** | "
        "host time | **host time / gloo** |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record["collectives"]:
        lines.append(
            f"| {row['op']} | {row['size']} | {row['gloo_s'] * 1e3:.3g} ms | {row['gloo_busbw']:.3g} | "
            f"{row['xla_s'] * 1e3:.3g} ms | {row['xla_busbw']:.3g} | **{row['xla_busbw_over_gloo']:.2f}x** | "
            f"{row['host_s'] * 1e3:.3g} ms | **{row['host_over_gloo']:.2f}x** |")
    t = record["targets"]
    lines += ["", f"Targets at >= 1 MiB: xla busbw >= 1x gloo's: **{'met' if t['xla_ge_gloo'] else 'not met'}** "
              f"(lowest {t['xla_min_ratio']:.2f}x); host time <= 1.5x gloo's: "
              f"**{'met' if t['host_le_1_5'] else 'not met'}** (highest {t['host_max_ratio']:.2f}x).", ""]
    lines += ["## Training steps (tiny Llama, per-rank batch 4 x 32, ranks as processes)", "",
              "| ranks | DDP step | FSDP2 step | DDP vs 1 rank | FSDP2 vs 1 rank | transport |",
              "|---|---|---|---|---|---|"]
    base = record["training"][0]
    for row in record["training"]:
        lines.append(
            f"| {row['ranks']} | {row['ddp_s'] * 1e3:.1f} ms | {row['fsdp_s'] * 1e3:.1f} ms | "
            f"{row['ddp_s'] / base['ddp_s']:.2f}x | {row['fsdp_s'] / base['fsdp_s']:.2f}x | {row['transport']} |")
    lines += ["", "With more ranks than cores, ranks share the cores: step times at 4 ranks on a 2-core "
              "machine measure oversubscription as much as communication.", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and steps")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the collective sweeps")
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="tpu", help=argparse.SUPPRESS)
    parser.add_argument("--task", default="sweep", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=",".join(SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker_main(args)
    if args.threads_worker:
        return threads_main(args)

    import torch

    from _common import plugin_facts
    from runtime import machine_facts, machine_tag

    started = time.perf_counter()
    sizes = ",".join(QUICK_SIZES if args.quick else SIZES)
    batches = "3" if args.quick else "5"
    n = args.ranks
    print(f"collectives on {n} ranks: gloo (CPU tensors) ...", flush=True)
    gloo = launch(n, ["--backend", "gloo", "--sizes", sizes, "--batches", batches])
    print("  xla (ranks as threads) ...", flush=True)
    xla = launch(n, ["--sizes", sizes, "--batches", batches], threads=True)
    print("  host (ranks as processes) ...", flush=True)
    host = launch(n, ["--sizes", sizes, "--batches", batches])
    rows = []
    for op in OPS:
        for label in sizes.split(","):
            key = f"{op}/{label}"
            row = {"op": op, "size": label, "bytes": SIZES[label], "gloo_s": gloo[key], "xla_s": xla[key],
                   "host_s": host[key], "gloo_busbw": busbw(op, label, gloo[key], n),
                   "xla_busbw": busbw(op, label, xla[key], n), "host_busbw": busbw(op, label, host[key], n)}
            row["xla_busbw_over_gloo"] = row["xla_busbw"] / row["gloo_busbw"]
            row["host_over_gloo"] = row["host_s"] / row["gloo_s"]
            rows.append(row)
            print(f"  {op:>14} {label:>6}: gloo {row['gloo_s'] * 1e3:8.3f} ms, xla busbw "
                  f"{row['xla_busbw_over_gloo']:5.2f}x gloo's, host time {row['host_over_gloo']:5.2f}x gloo's",
                  flush=True)
    big = [r for r in rows if r["bytes"] >= 1 << 20]
    targets = {"xla_min_ratio": min(r["xla_busbw_over_gloo"] for r in big),
               "host_max_ratio": max(r["host_over_gloo"] for r in big)}
    targets["xla_ge_gloo"] = targets["xla_min_ratio"] >= 1.0
    targets["host_le_1_5"] = targets["host_max_ratio"] <= 1.5

    training = []
    steps = "6" if args.quick else "8"
    for ranks in (1, 2, 4):
        print(f"training steps at {ranks} rank(s) ...", flush=True)
        ddp = launch(ranks, ["--task", "ddp", "--steps", steps])
        fsdp = launch(ranks, ["--task", "fsdp", "--steps", steps])
        training.append({"ranks": ranks, "ddp_s": ddp["step_s"], "fsdp_s": fsdp["step_s"],
                         "transport": ddp["transport"]})
        print(f"  DDP {ddp['step_s'] * 1e3:.1f} ms, FSDP2 {fsdp['step_s'] * 1e3:.1f} ms", flush=True)

    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    date = datetime.date.today().isoformat()
    record = {"date": date, "machine": machine, "plugin": plugin, "torch": torch.__version__, "ranks": n,
              "quick": args.quick, "collectives": rows, "targets": targets, "training": training,
              "xla_programs_compiled": xla.get("compilations"),
              "elapsed_s": round(time.perf_counter() - started, 1)}
    from _common import write_results

    stem = f"distributed-{date}-{machine_tag(machine, plugin['platform_name'])}" + ("-quick" if args.quick else "")
    write_results(record, markdown(record), args.out_dir, stem)


if __name__ == "__main__":
    main()
