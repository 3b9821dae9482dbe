"""`python -m torch_pjrt.readiness` / `torch-pjrt-readiness`: the command line.

Exit status: 0 every target mode is correct; 1 a target mode is wrong or
fails; 2 the command line is wrong; 3 the run is incomplete (budget, a part
that could not be judged); 130 interrupted (Ctrl-C). The report is written
in every case but a wrong command line.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

EXIT = {"pass": 0, "fail": 1, "incomplete": 3}


def parse_budget(text: Optional[str]) -> Optional[float]:
    """'90s', '5m', '1.5h' or plain seconds."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"a budget is a positive time like 90s, 5m or 1h; got {text!r}")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_price(text: str) -> tuple[str, float]:
    match = re.fullmatch(r"\s*([a-z]+)\s*=\s*(\d+(?:\.\d+)?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"a price is DEVICE=USD_PER_HOUR, like tpu=1.20; got {text!r}")
    return match.group(1), float(match.group(2))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torch_pjrt.readiness",
        description="Will this workload run correctly on the target, and at what cost? Runs it on "
                    "the target device (each mode asked for) and on CPU PyTorch from the same seed, "
                    "weights and data; checks correctness first, then measures; writes report.md, "
                    "report.html and report.json. See docs/readiness.md.")
    p.add_argument("file", nargs="?", help="a workload file (defines workload(); see docs/readiness.md)")
    p.add_argument("--example", help="a built-in workload (--list-examples names them)")
    p.add_argument("--hf", metavar="PATH", help="a Hugging Face model directory or config.json (no hub)")
    p.add_argument("--task", default="text-generation", help="with --hf: the task (default text-generation)")
    p.add_argument("--list-examples", action="store_true", help="name the built-in workloads and exit")
    p.add_argument("--modes", default="strict,fused,compiled",
                   help="target modes, comma-separated: strict, fused, compiled (default all three)")
    p.add_argument("--sizes", help="BATCHxLENGTH sizes, comma-separated; the first is the quality run's")
    p.add_argument("--budget", type=parse_budget, help="cap on the whole run: 90s, 5m, 1h (default none)")
    p.add_argument("--out", default="readiness-report", help="the report's folder (default ./readiness-report)")
    p.add_argument("--price", type=parse_price, action="append", default=[],
                   help="DEVICE=USD_PER_HOUR, repeatable (tpu=..., cpu=..., cuda=...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timed-steps", type=int, default=10, help="steps timed one by one per mode (default 10)")
    p.add_argument("--warm-cache", action="store_true",
                   help="use the compile caches as they are (default: every part starts cold)")
    p.add_argument("--device-memory-gib", type=float, help="memory of one target device, to judge sharding")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    from .examples import EXAMPLES

    if args.list_examples:
        for name, make in EXAMPLES.items():
            w = make()
            print(f"{name:22s} {w.kind:6s} {w.description}")
        return 0
    chosen = [x for x in (args.file, args.example, args.hf) if x]
    if len(chosen) != 1:
        print("readiness: name one workload: a file, --example NAME or --hf PATH "
              "(--list-examples names the built-ins)", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    from .runner import MODES, Plan, Runner, default_references, parse_sizes

    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        print(f"readiness: --modes takes {', '.join(MODES)}; got {args.modes!r}", file=sys.stderr)
        return 2
    spec = ({"file": str(Path(args.file).resolve())} if args.file else
            {"example": args.example} if args.example else {"hf": str(Path(args.hf).resolve()), "task": args.task})
    try:
        from .protocol import load

        workload = load(spec)
        sizes = parse_sizes(args.sizes, workload)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"readiness: {error}", file=sys.stderr)
        return 2
    if args.file:  # as the user typed it: reports carry no machine paths of their own
        workload.source = args.file
    elif args.hf:
        workload.source = f"--hf {args.hf} --task {args.task}"
    unsupported = [m for m in modes if m in workload.unsupported]
    for m in unsupported:
        print(f"readiness: {workload.name} does not run in {m}: {workload.unsupported[m]}", file=sys.stderr)
    modes = [m for m in modes if m not in unsupported]

    import torch_pjrt

    from . import report

    out = Path(args.out)
    plan = Plan(workload_spec=spec, workload=workload, modes=modes, sizes=sizes, out=out,
                budget_s=args.budget, prices=dict(args.price), seed=args.seed,
                target_device=torch_pjrt.settings().device_name, references=default_references(),
                timed_steps=max(1, args.timed_steps), device_memory_gib=args.device_memory_gib,
                warm_cache=args.warm_cache,
                command="python -m torch_pjrt.readiness " + " ".join(shlex.quote(a) for a in argv))
    start = time.time()
    runner = Runner(plan)
    parts = runner.run()
    result = report.build(plan, parts, runner.stopped, time.time() - start)
    paths = report.write(out, result)
    _summary(result, paths)
    if runner.stopped == "interrupted":
        return 130
    return EXIT[result["verdict"]["status"]]


def _summary(result: dict, paths: dict) -> None:
    verdict = result["verdict"]
    print(f"\n{result['workload']['name']}: {verdict['status'].upper()} - {verdict['summary']}")
    print(f"{'part':18s} {'status':12s} {'correct':11s} {'p50 ms':>9s} {'vs ref':>8s}")
    for p in result["parts"]:
        p50 = p["speed"]["p50_s"]
        ratio = p["speed"]["ratio_vs_reference"]
        print(f"{p['name']:18s} {p['status']:12s} {p['correctness']['status']:11s} "
              f"{p50 * 1e3 if p50 else float('nan'):9.3g} "
              f"{(f'{ratio:.2f}x' if ratio else '-'):>8s}")
    print("report: " + ", ".join(str(p) for p in paths.values()))
