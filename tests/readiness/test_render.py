"""The readiness report's schema and its Markdown and HTML renderers, on a
hand-made report (no device, no workload run)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import html5lib
import jsonschema
import pytest

from torch_pjrt.readiness.render_html import render_html
from torch_pjrt.readiness.render_md import render_markdown, sig

SCHEMA = Path(__file__).parents[2] / "python" / "torch_pjrt" / "readiness" / "schema.json"


def _speed(**kw: Any) -> dict[str, Any]:
    speed: dict[str, Any] = dict.fromkeys(
        ("startup_s", "build_s", "first_step_s", "compile_s", "p50_s", "p95_s", "throughput",
         "tokens_per_s", "ratio_vs_reference", "peak_device_mib", "peak_host_mib",
         "programs_per_step", "host_syncs_per_step", "compilations_after_warmup"))
    speed["steps_timed"] = 0
    speed.update(kw)
    return speed


def _cost(**kw: Any) -> dict[str, Any]:
    cost: dict[str, Any] = dict.fromkeys(
        ("price_per_hour", "time_per_correct_task_s", "per_correct_task_usd", "time_to_target_s",
         "target_reached_step", "cost_to_target_usd"))
    cost.update(kw)
    return cost


def _size(size: str, first: float, step: float | None, compilations: int | None,
          compile_s: float | None, reasons: dict[str, int] | None = None) -> dict[str, Any]:
    return {"size": size, "status": "done", "detail": "", "first_step_s": first, "step_s": step,
            "compilations": compilations, "compile_s": compile_s,
            "recompile_reasons": reasons or {}, "peak_device_mib": 212.5}


def make_report() -> dict[str, Any]:
    return {
        "schema": "torch-pjrt-readiness/1",
        "tool": {"torch_pjrt": "0.4.0.dev0", "torch": "2.7.0+cpu",
                 "created": "2025-12-05T13:06:00+00:00",
                 "command": "python -m torch_pjrt.readiness bert-tiny --budget 600"},
        "machine": {"cpu": "AMD EPYC 7B13", "cores": 2, "memory_gib": 7.8,
                    "target": "tpu:0 = TFRT_CPU_0 (cpu plugin)",
                    "reference": "cpu (PyTorch eager)"},
        "workload": {"name": "bert-tiny classification", "kind": "train",
                     "description": "Fine-tunes a 2-layer BERT on SST-2 <script>alert(1)</script>",
                     "source": "torch_pjrt.bench.hf_workloads", "steps": 20,
                     "sizes": ["8x64", "8x128", "16x128"], "metric": "accuracy", "target": 0.8,
                     "higher_is_better": True, "rtol": 1e-3, "atol": 1e-5,
                     "metric_tolerance": 0.01, "parameters": 4385920},
        "budget": {"seconds": 600, "used_s": 412.37, "stopped": None},
        "prices": {"tpu": 1.2, "cpu": 0.05},
        "price_assumption": "tpu at $1.20/h, cpu at $0.05/h (list prices, on demand)",
        "verdict": {"status": "fail",
                    "summary": "tpu fused differs from the reference at step 3 (loss | grad)."},
        "parts": [
            {"name": "cpu eager", "device": "cpu", "mode": "eager", "role": "reference",
             "status": "done", "detail": "",
             "correctness": {"status": "reference", "steps_compared": 0, "max_error": None,
                             "first_mismatch": None, "metric": 0.81, "reference_metric": None,
                             "samples_ok": None, "samples": None},
             "speed": _speed(startup_s=0.8, first_step_s=0.21, p50_s=0.0412, p95_s=0.0468,
                             steps_timed=18, throughput=194.2, peak_host_mib=812.0),
             "cost": _cost(price_per_hour=0.05, time_per_correct_task_s=0.0052,
                           per_correct_task_usd=7.2e-8),
             "sizes": [], "compile": None},
            {"name": "tpu strict", "device": "tpu", "mode": "strict", "role": "target",
             "status": "done", "detail": "",
             "correctness": {"status": "pass", "steps_compared": 20, "max_error": 3.1e-6,
                             "first_mismatch": None, "metric": 0.8125, "reference_metric": 0.81,
                             "samples_ok": 64, "samples": 64},
             "speed": _speed(startup_s=1.9, build_s=0.4, first_step_s=2.84, compile_s=2.51,
                             p50_s=0.0187, p95_s=0.0231, steps_timed=18, throughput=427.8,
                             ratio_vs_reference=2.2, peak_device_mib=212.5, peak_host_mib=1030.0,
                             programs_per_step=3, host_syncs_per_step=1,
                             compilations_after_warmup=0),
             "cost": _cost(price_per_hour=1.2, time_per_correct_task_s=0.00234,
                           per_correct_task_usd=7.8e-7, time_to_target_s=31.4,
                           target_reached_step=12, cost_to_target_usd=0.010467),
             "sizes": [_size("8x64", 2.84, 0.0187, 1, 2.51),
                       _size("8x128", 3.1, 0.0242, 1, 2.77, {"shape": 1}),
                       _size("16x128", 3.3, None, 2, None, {"shape": 1, "dtype": 1})],
             "compile": None},
            {"name": "tpu fused", "device": "tpu", "mode": "fused", "role": "target",
             "status": "done", "detail": "loss | grad diverge",
             "correctness": {"status": "fail", "steps_compared": 3, "max_error": 0.042,
                             "first_mismatch": "step 3: grad of encoder.layer.0 | attn.q",
                             "metric": 0.5, "reference_metric": 0.81, "samples_ok": 32,
                             "samples": 64},
             "speed": _speed(first_step_s=1.7, compile_s=1.5, p50_s=0.0091, p95_s=0.0102,
                             steps_timed=18, throughput=879.1, ratio_vs_reference=4.53,
                             peak_device_mib=230.0, programs_per_step=1,
                             host_syncs_per_step=0),
             "cost": _cost(price_per_hour=1.2),
             "sizes": [_size("8x64", 1.7, 0.0091, 1, 1.5), _size("8x128", 1.9, 0.012, 1, 1.6)],
             "compile": {"graphs": 1, "graph_breaks": 0, "programs": 1, "eager_ops": {}}},
        ],
        "census": {
            "part": "tpu strict", "step_s": 0.0187,
            "ops": [{"op": "aten::mm", "count": 48, "status": "native", "fallback_ops": [],
                     "fallback_s": 0.0},
                    {"op": "aten::_embedding_bag", "count": 2, "status": "fallback",
                     "fallback_ops": ["aten::_embedding_bag"], "fallback_s": 0.0031},
                    {"op": "aten::item", "count": 1, "status": "host", "fallback_ops": [],
                     "fallback_s": 0.0},
                    {"op": "aten::add.Tensor", "count": 96, "status": "native",
                     "fallback_ops": [], "fallback_s": 0.0}],
            "totals": {"native": 144, "fallback": 2, "unsupported": 0, "custom": 0, "host": 1,
                       "fallback_s": 0.0031},
            "syncs": [{"site": "trainer.py:88", "origin": "loss.item()", "op": "aten::item",
                       "count": 1}]},
        "bucketing": {"distinct_sizes": 3, "distinct_buckets": 2,
                      "buckets": {"batch": [8, 16], "length": [64, 128]},
                      "compilations_saved": 1, "compile_s_saved": 2.6, "padding_overhead": 0.125,
                      "note": "pad lengths to 64 or 128"},
        "adaptation": [
            {"kind": "op", "item": "aten::_embedding_bag", "why": "runs on the CPU each step",
             "effort": "medium"},
            {"kind": "sync", "item": "loss.item() at trainer.py:88", "why": "waits every step",
             "effort": "small"}],
        "spend": {"wall_s": 412.37, "by_device": {"tpu": 250.1, "cpu": 162.27}, "usd": 0.0856},
    }


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_report_validates(validator: jsonschema.Draft202012Validator) -> None:
    validator.validate(make_report())
    # It also survives a trip through JSON (as report.json is written).
    validator.validate(json.loads(json.dumps(make_report())))


@pytest.mark.parametrize("where", ["top", "part", "correctness", "speed", "cost"])
def test_typo_fails_validation(validator: jsonschema.Draft202012Validator, where: str) -> None:
    report = make_report()
    target = {"top": report, "part": report["parts"][1],
              "correctness": report["parts"][1]["correctness"],
              "speed": report["parts"][1]["speed"], "cost": report["parts"][1]["cost"]}[where]
    key = next(iter(target))
    target[key + "x"] = target.pop(key)
    assert not validator.is_valid(report)


def test_wrong_enum_fails_validation(validator: jsonschema.Draft202012Validator) -> None:
    report = make_report()
    report["parts"][1]["correctness"]["status"] = "passed"
    assert not validator.is_valid(report)


def test_html_parses_strictly_and_is_self_contained() -> None:
    page = render_html(make_report())
    assert page.startswith("<!DOCTYPE html>")
    html5lib.HTMLParser(strict=True).parse(page)
    assert page.count("<svg") == 3
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    for chart in re.findall(r"<svg.*?</svg>", page, re.S):
        assert "<title" in chart and "<desc" in chart


def test_html_escapes_report_strings() -> None:
    page = render_html(make_report())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_markdown_has_no_raw_html_from_the_report() -> None:
    assert r"SST-2 \<script>alert(1)\</script>" in render_markdown(make_report())


def test_html_parses_for_an_empty_report() -> None:
    report = make_report()
    report.update(parts=[], census=None, bucketing=None, adaptation=[])
    page = render_html(report)
    html5lib.HTMLParser(strict=True).parse(page)
    assert page.count("<svg") == 3
    assert "No op census was taken" in page


def _row(table_text: str, name: str) -> str:
    return next(line for line in table_text.splitlines() if line.startswith(f"| {name} |"))


def test_failing_part_shows_no_ratio() -> None:
    md = render_markdown(make_report())
    speed = md.split("## Speed and cost")[1].split("##")[0]
    assert "— (results wrong)" in _row(speed, "tpu fused")
    assert "4.53" not in speed
    assert "2.20×" in _row(speed, "tpu strict")
    page = render_html(make_report())
    assert "— (results wrong)" in page
    assert "4.53" not in page
    assert "speed and cost figures below are not wins" in md
    assert "speed and cost figures below are not wins" in page


def test_markdown_escapes_pipes_in_cells() -> None:
    md = render_markdown(make_report())
    assert r"step 3: grad of encoder.layer.0 \| attn.q" in md
    for line in md.splitlines():
        if line.startswith("| tpu fused |"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert len(cells) in (8, 15)


def test_nulls_render_as_dash() -> None:
    md = render_markdown(make_report())
    reference = _row(md.split("## Speed and cost")[1], "cpu eager")
    cells = [c.strip() for c in reference.split("|")[1:-1]]
    assert cells[2] == "—"  # compile s
    assert cells[7] == "—"  # ratio: the reference has none
    assert "- **Stopped by:** —" in md
    report = make_report()
    report["workload"]["parameters"] = None
    report["machine"]["memory_gib"] = None
    md = render_markdown(report)
    assert "- **Parameters:** —" in md and "- **Memory GiB:** —" in md
    assert "<dt>Parameters</dt><dd>—</dd>" in render_html(report)


def test_section_order_matches() -> None:
    sections = ["Verdict", "Workload", "Correctness", "Speed and cost", "Op census", "Sizes",
                "Bucketing", "Adaptation effort", "Budget and spend", "Machine", "Tool"]
    md = render_markdown(make_report())
    page = render_html(make_report())
    assert [s for s in re.findall(r"^## (.+)$", md, re.M)] == sections
    assert re.findall(r"<h2>(.+?)</h2>", page) == sections


@pytest.mark.parametrize("value, digits, expected", [
    (0.0123456, 3, "0.0123"), (9.996, 3, "10.0"), (12345.6, 3, "12300"),
    (2.5, 3, "2.50"), (0.010467, 4, "0.01047"), (0, 3, "0"), (3.1e-6, 3, "3.10e-06"),
    (None, 3, "—")])
def test_significant_figures(value: float | None, digits: int, expected: str) -> None:
    assert sig(value, digits) == expected
