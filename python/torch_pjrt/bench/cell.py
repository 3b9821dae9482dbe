"""One benchmark cell in this process: `python -m torch_pjrt.bench.cell
--workload W --mode M --out result.json` (the runner starts it with the
mode's settings in the environment)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .core import pin_threads, run_cell
from .catalog import modes, workloads


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    pin_threads()
    table = modes()
    workload = workloads(args.quick)[args.workload]
    result = run_cell(workload, table[args.mode], table["cpu_eager"], repeats=args.repeats,
                      batch_s=0.03 if args.quick else 0.1,
                      time_budget_s=20 if args.quick else 60)
    args.out.write_text(json.dumps(result.to_json()))
    print(json.dumps({k: v for k, v in result.to_json().items() if k != "step_samples"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
