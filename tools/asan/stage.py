"""Runs a Python script against the sanitizer build of torch_pjrt._C
(`make asan`): the package's Python files from python/ beside the extension
built in build/asan-py, ahead of the editable install.

    python tools/asan/stage.py BUILD_DIR SCRIPT [ARGS...]
    python tools/asan/stage.py BUILD_DIR -m MODULE [ARGS...]

The interpreter must start with the sanitizer runtime preloaded
(LD_PRELOAD), since python itself is not instrumented."""

from __future__ import annotations

import runpy
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stage(build: Path) -> Path:
    built = sorted(build.glob("csrc/backend/_C*.so"))
    if not built:
        raise SystemExit(f"no sanitizer build of _C under {build}: run `make asan`")
    target = build / "stage"
    package = target / "torch_pjrt"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(ROOT / "python" / "torch_pjrt", package,
                    ignore=shutil.ignore_patterns("__pycache__", "_C*.so"))
    shutil.copy2(built[-1], package / built[-1].name)
    return target


def main() -> None:
    build, script, *args = sys.argv[1:]
    target = stage(Path(build).resolve())
    # The editable install's finder would pick the ordinary build: drop it.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, str(target))
    if script == "-m":
        module, *args = args
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
