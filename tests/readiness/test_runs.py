"""`python -m torch_pjrt.readiness` end to end, as a user runs it: real
processes, the CPU reference against the tpu device, on small budgets. Each
report written is checked against schema.json and its HTML page parsed by a
spec-following parser."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
SCHEMA = json.loads((Path(__import__("torch_pjrt.readiness", fromlist=["x"]).__file__).parent
                     / "schema.json").read_text(encoding="utf-8"))


def run(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[int, dict, str]:
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "torch_pjrt.readiness", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    report_file = out / "report.json"
    assert report_file.exists(), proc.stdout + proc.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    check_files(out, report)
    return proc.returncode, report, proc.stdout + proc.stderr


def check_files(out: Path, report: dict) -> None:
    import html5lib
    import jsonschema

    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    html = (out / "report.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True).parse(html)  # raises on any parse error
    assert html.count("<svg") == 3 and "<script" not in html
    md = (out / "report.md").read_text(encoding="utf-8")
    assert report["workload"]["name"] in md and report["verdict"]["status"] in md.lower()


def part(report: dict, name: str) -> dict:
    return next(p for p in report["parts"] if p["name"] == name)


@pytest.mark.parametrize("example,size", [("tiny-llama-train", "4x32"), ("minilm-embed", "8x32"),
                                          ("tiny-llama-generate", "2x16"), ("cnn-train", "8x16")])
def test_builtin_example_passes_in_strict(tmp_path, example, size):
    code, report, output = run(tmp_path, "--example", example, "--modes", "strict", "--sizes", size,
                               "--timed-steps", "3", "--budget", "4m", "--price", "tpu=1.5")
    assert code == 0, output
    assert report["verdict"]["status"] == "pass"
    tpu = part(report, "tpu strict")
    assert tpu["correctness"]["status"] == "pass" and tpu["correctness"]["steps_compared"] >= 3
    assert tpu["speed"]["p50_s"] > 0 and tpu["speed"]["ratio_vs_reference"] > 0
    assert report["census"]["totals"]["native"] > 0
    assert report["census"]["totals"]["fallback"] == 0 and report["census"]["totals"]["unsupported"] == 0
    if report["workload"]["kind"] == "train":
        assert tpu["cost"]["time_to_target_s"] > 0 and tpu["cost"]["cost_to_target_usd"] > 0
    else:
        assert tpu["correctness"]["samples_ok"] == tpu["correctness"]["samples"] > 0
        assert tpu["cost"]["per_correct_task_usd"] > 0
    assert "tpu=1.5" in report["tool"]["command"]


def test_fused_and_compiled_modes(tmp_path):
    code, report, output = run(tmp_path, "--example", "cnn-train", "--modes", "fused,compiled",
                               "--sizes", "8x16", "--timed-steps", "3", "--budget", "5m")
    assert code == 0, output
    fused, compiled = part(report, "tpu fused"), part(report, "tpu compiled")
    assert fused["correctness"]["status"] == compiled["correctness"]["status"] == "pass"
    # fused eager runs a training step as one program; compiled says what it compiled
    assert fused["speed"]["programs_per_step"] < 5
    assert compiled["compile"]["graphs"] >= 1 and compiled["compile"]["programs"] >= 1
    assert compiled["speed"]["compilations_after_warmup"] == 0


def test_user_workload_file_and_shape_sweep(tmp_path):
    code, report, output = run(tmp_path, str(WORKLOADS / "sine.py"), "--modes", "strict",
                               "--sizes", "2x8,2x16,2x12", "--timed-steps", "2")
    assert code == 0, output
    sizes = part(report, "tpu strict")["sizes"]
    assert [s["size"] for s in sizes] == ["2x8", "2x16", "2x12"]
    # sin and mul: two programs for the first size and for every new one
    assert [s["compilations"] for s in sizes] == [2, 2, 2]
    assert all(sum(s["recompile_reasons"].values()) == 2 for s in sizes[1:])
    bucketing = report["bucketing"]
    assert bucketing["distinct_sizes"] == 3 and bucketing["distinct_buckets"] == 2
    assert bucketing["compilations_saved"] == 2
    assert bucketing["buckets"] == {"batch": [2], "length": [8, 16]}
    assert any(a["kind"] == "shapes" for a in report["adaptation"])


def test_wrong_op_result_fails_the_report(tmp_path):
    code, report, output = run(tmp_path, str(WORKLOADS / "wrong_op.py"), "--modes", "strict",
                               "--timed-steps", "2")
    assert code == 1, output
    assert report["verdict"]["status"] == "fail"
    tpu = part(report, "tpu strict")
    assert tpu["correctness"]["status"] == "fail"
    assert tpu["correctness"]["samples_ok"] == 0
    assert tpu["speed"]["ratio_vs_reference"] is None  # no speed figure as a win
    assert tpu["cost"]["per_correct_task_usd"] is None
    ops = {o["op"]: o for o in report["census"]["ops"]}
    assert ops["readiness_test::scale"]["status"] == "custom"
    assert "results wrong" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")


def test_cpu_fallback_is_named_with_its_time(tmp_path):
    code, report, output = run(tmp_path, str(WORKLOADS / "fallback.py"), "--modes", "strict",
                               "--timed-steps", "2")
    assert code == 0, output
    ops = {o["op"]: o for o in report["census"]["ops"]}
    assert ops["aten::linalg_eig"]["status"] == "fallback"
    assert ops["aten::linalg_eig"]["fallback_ops"] == ["aten::linalg_eig"]
    assert ops["aten::linalg_eig"]["fallback_s"] > 0
    assert report["census"]["totals"]["fallback"] >= 1 and report["census"]["totals"]["fallback_s"] > 0
    assert any(a["item"].startswith("aten::linalg_eig") for a in report["adaptation"])
    syncs = {(s["site"], s["op"]): s["count"] for s in report["census"]["syncs"]}
    assert syncs.get(("fallback.py:18", "aten::_local_scalar_dense")) == 1, syncs
    assert any(a["kind"] == "sync" and a["item"].startswith("fallback.py:18") for a in report["adaptation"])


def test_op_that_raises_on_the_device_is_unsupported(tmp_path):
    env = dict(os.environ, TORCH_PJRT_FALLBACK="error")  # the fallback refused: eig raises on tpu
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "torch_pjrt.readiness", str(WORKLOADS / "fallback.py"),
                           "--modes", "strict", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    check_files(out, report)
    tpu = part(report, "tpu strict")
    assert tpu["status"] == "error" and "linalg_eig" in tpu["detail"]
    assert tpu["correctness"]["status"] == "error"
    ops = {o["op"]: o for o in report["census"]["ops"]}
    assert ops["aten::linalg_eig"]["status"] == "unsupported"
    assert report["census"]["totals"]["unsupported"] == 1
    assert any(a["item"] == "aten::linalg_eig" and a["effort"] == "large"
               for a in report["adaptation"])


def test_budget_expiry_writes_a_partial_report(tmp_path):
    start = time.time()
    code, report, output = run(tmp_path, str(WORKLOADS / "slow.py"), "--modes", "strict",
                               "--budget", "15s")
    assert time.time() - start < 60, "the budget did not stop the run"
    assert code == 3, output
    assert report["budget"]["stopped"] == "budget" and report["verdict"]["status"] == "incomplete"
    statuses = {p["name"]: p["status"] for p in report["parts"]}
    assert statuses["cpu eager"] == "budget"  # 200 steps of 0.4 s do not fit 15 s
    assert statuses["tpu strict"] == "budget"  # never started
    assert part(report, "tpu strict")["correctness"]["status"] == "incomplete"


def test_interrupted_run_writes_a_partial_report(tmp_path):
    out = tmp_path / "report"
    # Ctrl-C's default action in the child, whatever this process inherited:
    # a shell running the suite as a background job ignores SIGINT, and a
    # Python started with SIGINT ignored never raises KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-m", "torch_pjrt.readiness", str(WORKLOADS / "slow.py"),
                             "--modes", "strict", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    record = out / "parts" / "cpu-eager.json"
    deadline = time.time() + 60
    while time.time() < deadline:
        if record.exists() and '"quality"' in record.read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the reference never reached its quality run")
    proc.send_signal(signal.SIGINT)  # the parent only, as a test harness would
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    check_files(out, report)
    assert report["budget"]["stopped"] == "interrupted"
    assert part(report, "cpu eager")["status"] == "interrupted"
    assert part(report, "tpu strict")["status"] == "interrupted"


def test_crashing_part_is_reported_and_fails(tmp_path):
    code, report, output = run(tmp_path, str(WORKLOADS / "crash.py"), "--modes", "strict",
                               "--timed-steps", "2")
    assert code == 1, output
    tpu = part(report, "tpu strict")
    assert tpu["status"] == "crashed" and "signal" in tpu["detail"]
    assert tpu["correctness"]["status"] == "error"
    assert part(report, "cpu eager")["status"] == "done"


@pytest.mark.parametrize("args,message", [
    ([], "name one workload"),
    (["--example", "nope"], "no built-in example"),
    (["--example", "cnn-train", "--modes", "turbo"], "--modes takes"),
    (["--example", "cnn-train", "--sizes", "8by8"], "a size is BATCHxLENGTH"),
])
def test_bad_command_lines_exit_2(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "torch_pjrt.readiness", *args, "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "r").exists()


def test_list_examples():
    proc = subprocess.run([sys.executable, "-m", "torch_pjrt.readiness", "--list-examples"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["tiny-llama-train", "tiny-llama-generate", "minilm-embed", "cnn-train"]


@pytest.mark.parametrize("task", ["text-generation", "fill-mask"])
def test_hugging_face_model_from_a_local_config(tmp_path, task):
    import transformers

    model_dir = tmp_path / "tiny-model"
    if task == "text-generation":
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=1, num_attention_heads=2,
                                          num_key_value_heads=1, max_position_embeddings=64)
    else:
        config = transformers.BertConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         max_position_embeddings=64)
    config.save_pretrained(model_dir)  # a config only: weights come from the seed
    code, report, output = run(tmp_path, "--hf", str(model_dir), "--task", task, "--modes", "strict",
                               "--sizes", "2x8", "--timed-steps", "2")
    assert code == 0, output
    assert report["workload"]["source"] == f"--hf {model_dir} --task {task}"
    tpu = part(report, "tpu strict")
    assert tpu["correctness"]["status"] == "pass"
    assert tpu["correctness"]["samples_ok"] == tpu["correctness"]["samples"] == 2 * 3
