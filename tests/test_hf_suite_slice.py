"""A fast slice of `make hf-suite`: Hugging Face's own DistilBERT modeling
tests run on the CPU and on tpu; every test that passes on the CPU must pass
on tpu, with no CPU fallback. Skipped (with the reason shown) only where
Hugging Face's test files are not beside the checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "hf_suite"))

import run as hf_suite  # noqa: E402

FAMILY = "distilbert"


def find_tests() -> Path | None:
    try:
        return hf_suite.tests_dir(None)
    except SystemExit:
        return None


@pytest.mark.skipif(find_tests() is None,
                    reason="Hugging Face's test files (../shared/transformers-tests or "
                           "$TORCH_PJRT_HF_TESTS) are not present")
def test_distilbert_suite_passes_on_tpu_where_it_passes_on_cpu(tmp_path):
    pytest.importorskip("parameterized", reason="make test installs requirements/hf-suite.txt")
    tree = hf_suite.prepare_tree(find_tests(), tmp_path)
    records = {}
    for device in ("cpu", "tpu"):
        path = hf_suite.run_family(tree, FAMILY, device, tmp_path, timeout=300, select=None)
        records[device] = {r["test"]: r for r in map(json.loads, path.read_text().splitlines())}
    cpu_passed = {t for t, r in records["cpu"].items() if r["outcome"] == "passed"}
    assert len(cpu_passed) > 50, f"only {len(cpu_passed)} tests passed on the CPU"
    tpu = records["tpu"]
    failed = {t: tpu.get(t, {}).get("message", "not run") for t in cpu_passed
              if tpu.get(t, {}).get("outcome") != "passed"}
    assert not failed, f"{len(failed)} tests pass on the CPU but not on tpu: {failed}"
    fallbacks = {t: tpu[t]["fallbacks"] for t in cpu_passed if tpu[t].get("fallbacks")}
    assert not fallbacks, f"tests that passed through a CPU fallback: {fallbacks}"
