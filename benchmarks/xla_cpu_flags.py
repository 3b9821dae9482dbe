"""The XLA CPU plugin's own compiler options, measured on torch-pjrt's
compiled workloads: each option set runs the harness cells (checked against
CPU PyTorch before they are timed, so an option that changed results would
show as WRONG) in its own processes with XLA_FLAGS set, interleaved with
the default in every round.

    python benchmarks/xla_cpu_flags.py [--quick] [--rounds N] [--models a,b]

Only options that keep semantics are tried (no fast math). Writes
benchmarks/results/xla_cpu_flags-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from torch_pjrt.bench import runner
from torch_pjrt.bench.machine import machine_tag

OPTIONS = {
    "default": "",
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    "xnn_dot_fusion": "--xla_cpu_experimental_xnn_fusion_type=dot",
    "xnn_graph_greedy": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "ynn_dot_fusion": "--xla_cpu_experimental_ynn_fusion_type=dot",
    "onednn": "--xla_cpu_use_onednn=true",
    "onednn_dot_fusion": "--xla_cpu_experimental_onednn_fusion_type=dot",
    "concurrency_scheduler": "--xla_cpu_enable_concurrency_optimized_scheduler=true",
    # The default again, as a control: how far apart two measurements of
    # the same options fall on this machine.
    "default_again": "",
}


def table(merged: dict, models: list[str], names: list[str], options: dict, date: str,
          machine: dict, mode: str, rounds: int, quick: bool) -> list[str]:
    """The Markdown table: each option set's step time relative to the
    default's, per workload."""
    lines = [f"# XLA CPU plugin options on {mode} (step time relative to the default options)",
             "", f"{date}, {machine['cpu_model']}, {machine['cores']} cores; plugin "
             f"{machine.get('plugin')}; {rounds} interleaved rounds, median step time per cell"
             f"{'; quick sizes' if quick else ''}.", "",
             "| option set | XLA_FLAGS | " + " | ".join(models) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in models) + " |"]
    for name in names:
        row = []
        for w in models:
            c, base = merged[(name, w)], merged[("default", w)]
            if c["status"] != "ok":
                row.append(c["status"].upper())
            elif base["status"] != "ok":
                row.append("n/a")
            else:
                row.append(f"{base['step_s'] / c['step_s']:.2f}x ({c['step_s'] * 1e3:.2f} ms)")
        lines.append(f"| {name} | `{options[name] or '(none)'}` | " + " | ".join(row) + " |")
    return lines + ["", "Above 1x the option set is faster than the default. Every cell was "
                    "checked against CPU PyTorch before it was timed."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default="llama_fwd,llama_train,matmul")
    parser.add_argument("--mode", default="tpu_compiled")
    parser.add_argument("--out", type=Path, default=Path("benchmarks") / "results")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    models = [m for m in args.models.split(",") if m]
    names = list(OPTIONS)
    cells: dict[tuple[str, str], list[dict]] = {}
    machine = None
    for r in range(args.rounds):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            record = runner.run(models, [args.mode], quick=args.quick, repeats=5 if args.quick else 9,
                                title="xla flags", extra_env={"XLA_FLAGS": OPTIONS[name]},
                                progress=False)
            machine = record["machine"]
            for result in record["results"]:
                cells.setdefault((name, result["workload"]), []).append(result)
            print(f"round {r + 1}/{args.rounds}: {name} done", flush=True)
    merged = {key: runner.merge_rounds(rounds) for key, rounds in cells.items()}
    date = datetime.date.today().isoformat()
    lines = table(merged, models, names, OPTIONS, date, machine, args.mode, args.rounds, args.quick)
    stem = f"xla_cpu_flags-{date}-{machine_tag(machine)}" + ("-quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps({
        "date": date, "machine": machine, "mode": args.mode, "rounds": args.rounds,
        "options": OPTIONS, "results": {f"{n}/{w}": v for (n, w), v in merged.items()},
        "medians_ms": {f"{n}/{w}": v["step_s"] * 1e3
                       for (n, w), v in merged.items() if v["status"] == "ok"}}, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
