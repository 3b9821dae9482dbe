"""The benchmark harness's own logic, on trivial workloads: statistics,
result checking (including the wrong-result path, which must not be timed),
cell errors, unavailable modes, and the Markdown/JSON/chart writing. The
suite never runs the benchmarks themselves."""

from __future__ import annotations

import io
import json

import pytest
import torch

import torch_pjrt
from torch_pjrt.bench import Case, Mode, Workload, compare, run_cell, settled, spread
from torch_pjrt.bench import report, runner

NAME = torch_pjrt.settings().device_name
CPU = Mode("cpu_eager", "cpu")
DEV = Mode("tpu_strict", NAME)


def test_spread_and_settled():
    assert spread([1.0, 1.0, 1.0]) == 0
    assert spread([0.9, 1.0, 1.2]) == pytest.approx(0.3)
    assert not settled([5.0, 1.0])  # too few
    assert not settled([5.0, 1.0, 1.0])
    assert settled([5.0, 1.0, 1.05, 0.98])


def test_compare_close_equal_and_shapes():
    a = torch.tensor([1.0, 2.0])
    assert compare([a], [a + 1e-7], "close", 1e-4, 1e-6)[0]
    ok, err, msg = compare([a], [a + 1], "close", 1e-4, 1e-6)
    assert not ok and err == pytest.approx(1.0) and "max error" in msg
    ok, _, msg = compare([torch.tensor([1, 2])], [torch.tensor([1, 3])], "equal", 0, 0)
    assert not ok and "1 elements differ" in msg
    ok, _, msg = compare([torch.zeros(2)], [torch.zeros(3)], "close", 0, 0)
    assert not ok and "shape" in msg
    ok, _, msg = compare([a, a], [a], "close", 0, 0)
    assert not ok and "2 outputs" in msg


def scale_workload(factor_on_device: float) -> Workload:
    """x * 2 on CPU; on the device x * 2 * factor (1.0: right, else wrong)."""
    def build(mode: Mode) -> Case:
        x = torch.arange(6.0).to(mode.device)
        factor = 2.0 * (factor_on_device if mode.on_device else 1.0)
        sync = torch.tpu.synchronize if mode.on_device else (lambda: None)
        return Case(step=lambda: x * factor, sync=sync)
    return Workload("scale", "x * 2", build, check_steps=2)


def test_a_correct_cell_is_timed_with_every_figure():
    r = run_cell(scale_workload(1.0), DEV, CPU, repeats=3, batch_s=0.005, time_budget_s=2)
    assert r.status == "ok", r.detail
    assert r.first_step_s > 0 and r.step_s > 0 and len(r.step_samples) == 3
    assert r.step_spread >= 0 and r.steps_per_batch >= 1 and r.warmup_steps >= 1
    assert r.compilations_after_warmup == 0 and r.fallbacks == 0
    assert r.peak_host_rss_mib > 0 and r.peak_device_mib is not None
    assert r.max_error == 0


def test_a_wrong_result_is_reported_and_not_timed():
    r = run_cell(scale_workload(1.5), DEV, CPU, repeats=3, batch_s=0.005)
    assert r.status == "wrong" and "max error" in r.detail
    assert r.step_s is None and r.step_samples == [] and r.warmup_steps == 0


def test_a_failing_workload_is_an_error_cell_not_a_crash():
    def build(mode):
        def step():
            raise ValueError("boom")
        return Case(step=step)
    r = run_cell(Workload("bad", "raises", build), CPU, CPU, repeats=1)
    assert r.status == "error" and "ValueError: boom" in r.detail


def test_unavailable_modes_say_why():
    mode = Mode("nothing", "cpu", unavailable=lambda: "no such hardware")
    r = run_cell(scale_workload(1.0), mode, CPU)
    assert r.status == "unavailable" and r.detail == "no such hardware"
    w = scale_workload(1.0)
    w.unsupported = {"cpu_eager": "not for this mode"}
    assert run_cell(w, CPU, CPU).detail == "not for this mode"


def fake_run(results):
    return {
        "title": "t", "date": "2026-12-02", "quick": True, "repeats": 3,
        "machine": {"cpu_model": "Test CPU", "cores": 2, "memory_gib": 1.0, "plugin": "p.so",
                    "pjrt_api_version": "0.1", "platform_name": "cpu"},
        "versions": {"torch": torch.__version__},
        "workloads": [{"name": "scale", "description": "x * 2"},
                      {"name": "matmul", "description": "mm"}],
        "modes": ["cpu_eager", "tpu_strict"],
        "mode_descriptions": {"cpu_eager": "CPU", "tpu_strict": "strict"},
        "results": results,
    }


def cell(workload, mode, step_s, **kw):
    base = dict(workload=workload, mode=mode, status="ok", detail="", first_step_s=1.0,
                warmup_s=0.1, step_s=step_s, step_spread=0.1, compilations_first_step=3,
                compilations_after_warmup=0, fallbacks=0, host_syncs_per_step=0.0,
                peak_host_rss_mib=10.0, peak_device_mib=1.0, gflops=None)
    base.update(kw)
    return base


def test_report_leads_with_ratios_and_marks_wrong_cells(tmp_path):
    run = fake_run([
        cell("scale", "cpu_eager", 0.002), cell("scale", "tpu_strict", 0.001),
        cell("matmul", "cpu_eager", 0.01, gflops=100.0),
        dict(cell("matmul", "tpu_strict", None), status="wrong", detail="output 0: max error 1"),
    ])
    text = report.markdown(run)
    first_table = text.split("## Median")[0]
    assert "| scale | 1.00x | 2.00x |" in first_table
    assert "| matmul | 1.00x | WRONG¹ |" in first_table
    assert "matmul / tpu_strict: output 0: max error 1" in text
    assert "100 (100%)" in text  # the peak is the best matmul of the run
    paths = report.write(run, tmp_path, "stem", plot=True)
    assert json.loads((tmp_path / "stem.json").read_text())["results"][1]["step_s"] == 0.001
    assert (tmp_path / "stem.md").read_text() == text
    pytest.importorskip("matplotlib")
    assert (tmp_path / "stem.png").stat().st_size > 1000 and len(paths) == 3


def test_progress_bar_counts_and_estimates():
    out = io.StringIO()
    bar = runner.Progress(4, stream=out, width=8)
    bar.show("a / b")
    bar.step()
    bar.show("c / d")
    bar.close()
    text = out.getvalue()
    assert "0/4" in text and "1/4" in text and "c / d" in text and "min left" in text


def test_machine_tag_names_the_cpu_and_plugin():
    facts = {"cpu_model": "Intel(R) Xeon(R) Processor @ 2GHz", "cores": 2, "platform_name": "cuda"}
    assert runner.machine_tag(facts) == "intel-xeon-processor-2c-cuda"


def test_rounds_merge_to_the_median_and_keep_failures():
    def cell(step, first, status="ok"):
        return {"status": status, "step_s": step, "first_step_s": first, "flops_per_step": 2e9,
                "detail": "boom" if status != "ok" else ""}

    merged = runner.merge_rounds([cell(1.0, 5.0), cell(3.0, 7.0)])
    assert merged["step_s"] == 2.0 and merged["first_step_s"] == 6.0
    assert merged["rounds_step_s"] == [1.0, 3.0] and merged["gflops"] == 1.0
    assert runner.merge_rounds([cell(1.0, 5.0), cell(9.0, 5.0), cell(2.0, 5.0)])["step_s"] == 2.0
    failed = runner.merge_rounds([cell(1.0, 5.0), cell(None, None, "error")])
    assert failed["status"] == "error" and failed["detail"] == "boom"
    with pytest.raises(SystemExit):
        runner.main(["--rounds", "0"])


def test_warm_start_runs_a_second_process_on_the_first_ones_caches(monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    seen = []

    def fake_once(workload, mode, quick, repeats, timeout_s, env, out):
        seen.append((out.name, env["TORCH_PJRT_CACHE_DIR"], env["TORCHINDUCTOR_CACHE_DIR"],
                     env.get("JAX_COMPILATION_CACHE_DIR")))
        first = 4.0 if out.name == "cold.json" else 1.0
        return cell(workload, mode, 0.01, first_step_s=first, compilations_first_step=int(first))

    monkeypatch.setattr(runner, "_cell_once", fake_once)
    result = runner.run_cell_process("scale", "tpu_compiled", True, 3, 60, {}, warm_start=True)
    (cold, *cold_dirs), (warm, *warm_dirs) = seen
    assert (cold, warm) == ("cold.json", "warm.json") and cold_dirs == warm_dirs
    assert all(cold_dirs)  # ours, inductor's and JAX's caches are shared by the two processes
    assert result["first_step_s"] == 4.0 and result["warm_first_step_s"] == 1.0
    assert result["warm_compilations_first_step"] == 1
    seen.clear()
    assert "warm_first_step_s" not in runner.run_cell_process("scale", "tpu_compiled", True, 3, 60, {})
    assert [s[0] for s in seen] == ["cold.json"] and seen[0][3] is None

    merged = runner.merge_rounds([dict(result, warm_first_step_s=w) for w in (1.0, 2.0, 6.0)])
    assert merged["warm_first_step_s"] == 2.0 and merged["rounds_warm_first_step_s"] == [1.0, 2.0, 6.0]
    run = dict(fake_run([dict(result, workload="scale", mode="cpu_eager"),
                         cell("scale", "tpu_strict", 0.01)]), warm_start=True)
    text = report.markdown(run)
    assert "## Warm start" in text and "| scale | 1.00 s / 25% | n/a |" in text
