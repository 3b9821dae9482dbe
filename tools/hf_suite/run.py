"""`make hf-suite`: Hugging Face's own Transformers test files, each family run
on the CPU and then on the tpu device (through TRANSFORMERS_TEST_BACKEND /
TRANSFORMERS_TEST_DEVICE), compared test by test.

    python tools/hf_suite/run.py [--families llama,bert] [--tests DIR] [--out DIR]

The test files are read from ../shared/transformers-tests (or --tests, or
$TORCH_PJRT_HF_TESTS) and copied into build/hf-suite/tree; they are never
edited. Each run writes one JSON line per test; report.py turns them into the
table."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FAMILIES = ["llama", "gpt2", "bert", "roberta", "opt", "gpt_neox", "bart", "whisper", "clip",
            "distilbert"]


def tests_dir(given: str | None) -> Path:
    for cand in (given, os.environ.get("TORCH_PJRT_HF_TESTS"),
                 str(ROOT.parent / "shared" / "transformers-tests")):
        if cand and (Path(cand) / "tests" / "test_modeling_common.py").is_file():
            return Path(cand).resolve()
    raise SystemExit("Hugging Face's test files were not found: pass --tests DIR or set "
                     "TORCH_PJRT_HF_TESTS to the folder that holds tests/test_modeling_common.py")


def prepare_tree(src: Path, work: Path) -> Path:
    """A copy of the test tree, with src/transformers pointing at the installed
    package (test_pipeline_mixin.py reads it)."""
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(src, tree, symlinks=True)
    import transformers
    (tree / "src").mkdir(exist_ok=True)
    link = tree / "src" / "transformers"
    if not link.exists():
        link.symlink_to(Path(transformers.__file__).parent, target_is_directory=True)
    return tree


def device_env(device: str, record: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", DISABLE_SAFETENSORS_CONVERSION="true",
               HF_SUITE_RECORD=str(record), PYTHONPATH=str(HERE) + os.pathsep + env.get("PYTHONPATH", ""),
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    env.pop("RUN_SLOW", None)
    env.pop("TRANSFORMERS_TEST_BACKEND", None)
    env.pop("TRANSFORMERS_TEST_DEVICE", None)
    if device != "cpu":
        env.update(TRANSFORMERS_TEST_BACKEND="torch_pjrt", TRANSFORMERS_TEST_DEVICE=device)
    return env


def run_family(tree: Path, family: str, device: str, out: Path, timeout: int,
               select: str | None) -> Path:
    record = out / f"{family}-{device}.jsonl"
    test_file = tree / "tests" / "models" / family / f"test_modeling_{family}.py"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "hf_suite_plugin", "-p", "no:cacheprovider",
           "--rootdir", str(tree), f"--timeout={timeout}", "-o", "addopts=", str(test_file)]
    if select:
        cmd += ["-k", select]
    started = time.monotonic()
    log = out / f"{family}-{device}.log"
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=tree, env=device_env(device, record), stdout=f,
                       stderr=subprocess.STDOUT)
    print(f"  {family} on {device}: {time.monotonic() - started:.0f} s", flush=True)
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--devices", default="cpu,tpu")
    ap.add_argument("--tests", default=None, help="folder holding Hugging Face's tests/")
    ap.add_argument("--work", default=str(ROOT / "build" / "hf-suite"))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test")
    ap.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    ap.add_argument("--report", default=str(ROOT / "benchmarks" / "results"),
                    help="folder for the table (hf-suite-DATE.md/.json); empty for none")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tree = prepare_tree(tests_dir(args.tests), work)
    runs = work / "runs"
    runs.mkdir(exist_ok=True)
    families = [f for f in args.families.split(",") if f]
    for family in families:
        for device in args.devices.split(","):
            run_family(tree, family, device, runs, args.timeout, args.select)
    if args.report:
        import report
        report.write(runs, families, Path(args.report))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
