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

_CACHE = tempfile.mkdtemp(prefix="torch_pjrt_test_cache_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE
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
