"""Trains torchtitan's Llama debug model with FSDP2 on 2 processes for 10
steps twice, with the same seed: on the tpu device (torch-pjrt's c10d
backend) and on the CPU with gloo; prints both loss curves side by side.

    python examples/torchtitan/compare.py [--ranks 2] [--steps 10]

Run by `make torchtitan`, with the interpreter of .venv-torchtitan.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEP = re.compile(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)")
COLOR = re.compile(r"\x1b\[[0-9;]*m")


def train(device: str, ranks: int, steps: int, assets: Path, out: Path) -> tuple[dict[int, float], float]:
    args = ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", str(steps),
            "--parallelism.data_parallel_shard_degree", str(ranks),
            # torchtitan's default, "spmd_types", refuses FSDP2 over tpu
            # parameters (see docs/DISTRIBUTED.md); full_dtensor is its
            # documented alternative.
            "--parallelism.spmd_backend", "full_dtensor",
            "--training.seq_len", "256", "--training.local_batch_size", "2",
            "--comm.trace_buf_size", "0", "--debug.seed", "42",
            "--hf_assets_path", str(assets / "tokenizer"),
            "--dataloader.dataset_path", str(assets / "c4_test"),
            "--dump_folder", str(out / device)]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone",
              f"--nproc-per-node={ranks}", str(HERE / "launch.py")]
    if device == "cpu":
        launch.append("--cpu")
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICES=str(ranks))
    start = time.perf_counter()
    run = subprocess.run([*launch, "--", *args], env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - start
    log = COLOR.sub("", run.stdout + run.stderr)
    (out / f"{device}.log").write_text(log)
    if run.returncode != 0:
        tail = "\n".join(log.splitlines()[-30:])
        raise SystemExit(f"torchtitan on {device} failed (exit {run.returncode}):\n{tail}")
    return {int(s): float(v) for s, v in STEP.findall(log)}, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("build/torchtitan"))
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(HERE / "assets.py"), str(opts.out / "assets")], check=True)
    cpu, cpu_s = train("cpu", opts.ranks, opts.steps, opts.out / "assets", opts.out)
    tpu, tpu_s = train("tpu", opts.ranks, opts.steps, opts.out / "assets", opts.out)
    print(f"\ntorchtitan llama3_debugmodel, FSDP2 on {opts.ranks} processes, seed 42")
    print("| step | cpu (gloo) loss | tpu loss |\n|---|---|---|")
    for step in sorted(cpu):
        print(f"| {step} | {cpu[step]:.4f} | {tpu.get(step, float('nan')):.4f} |")
    print("(torchtitan logs, with full_dtensor, the sum over ranks of a loss that is already the\n"
          " global mean: the logged value is ranks x the mean on both devices. The two curves start\n"
          " apart because the same seed gives different initial weights: tpu draws with THREE_FRY,\n"
          " the CPU with mt19937, as CUDA's Philox differs from the CPU.)")
    last = max(cpu)
    print(f"loss at step {last} / step 1: cpu {cpu[last] / cpu[1]:.3f}, tpu {tpu[last] / tpu[1]:.3f}")
    print(f"wall time of the run: cpu {cpu_s:.1f} s, tpu {tpu_s:.1f} s ({tpu_s / cpu_s:.2f}x)")
    fell = tpu[last] < 0.75 * tpu[1]
    print("tpu loss falls" if fell else "tpu loss does NOT fall")
    sys.exit(0 if fell else 1)


if __name__ == "__main__":
    main()
