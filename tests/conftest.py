"""Test-wide set-up: a private compile cache, so tests neither read nor fill
the user's ~/.cache/torch_pjrt, and helpers to run code in a fresh process
(settings are read once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

def pytest_addoption(parser):
    parser.addoption("--eager-mode", choices=("strict", "debug", "fused"), default=None,
                     help="run the tests with TORCH_PJRT_EAGER set to this mode (make test runs "
                          "the device, training and Transformers files again under fused)")


def pytest_configure(config):
    # Before any test module imports torch_pjrt, which reads its settings
    # once; subprocesses the tests start inherit it too.
    mode = config.getoption("--eager-mode")
    if mode:
        os.environ["TORCH_PJRT_EAGER"] = mode
    config.addinivalue_line("markers", "strict_only: checks per-op launches, which fused eager "
                                       "defers by design (skipped under --eager-mode=fused)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TORCH_PJRT_EAGER") != "fused":
        return
    skip = pytest.mark.skip(reason="counts single-op launches; fused eager records them instead")
    for item in items:
        if "strict_only" in item.keywords:
            item.add_marker(skip)


_CACHE = tempfile.mkdtemp(prefix="torch_pjrt_test_cache_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE
# AOTAutograd's cache (which stores compiled graphs of the tpu backend) lives
# under inductor's cache folder: one per test process too, so no test loads
# graphs an earlier run stored.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_CACHE, "inductor")
# Models come from configs or installed packages; never from a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter with extra environment variables."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python_in_subprocess():
    return run_python


@pytest.fixture
def fresh_compile_state():
    """Dynamo's caches, the compile report and the metrics reset around a
    test that counts graphs, eager nodes or fallbacks."""
    import torch
    import torch_pjrt

    torch._dynamo.reset()
    torch_pjrt.reset_compile_report()
    torch_pjrt.reset_metrics()
    yield
    torch._dynamo.reset()
