"""The benchmark harness: `python benchmarks/run.py [--quick] ...`, the same
as `python -m torch_pjrt.bench` (docs/BENCHMARKS.md)."""

from torch_pjrt.bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
