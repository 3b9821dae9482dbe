"""`make demo` end to end, in a fresh process: it checks itself against CPU
(losses eager and compiled, the greedy sample, the MiniLM embeddings) and
exits non-zero on any mismatch."""

from __future__ import annotations


def test_demo_runs_and_matches_cpu(tmp_path, python_in_subprocess):
    proc = python_in_subprocess("import runpy; runpy.run_module('torch_pjrt.demo', run_name='__main__')",
                                env={"TORCH_PJRT_CACHE_DIR": str(tmp_path)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "every step's loss matches CPU" in out
    assert "0 ops left to eager mode" in out
    assert "identical to the CPU sample" in out
    assert "recompiles after the first step              0" in out
    assert "CPU fallbacks                                none" in out
