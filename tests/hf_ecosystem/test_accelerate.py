"""Hugging Face accelerate on the tpu device, without a configuration.

Once torch_pjrt is imported, `Accelerator()` picks the tpu device: that
import, or TORCH_PJRT_AUTOLOAD=1 in the environment (torch's backend
autoload then imports torch_pjrt with torch), is the one line a script
needs; a process with neither gets the CPU. Then
`accelerate launch` runs a small training script (scripts/accelerate_train.py:
the tiny Llama, AdamW, `prepare`, `autocast`, `backward`) on the tpu device:

- with `--mixed_precision bf16`, autocast computes the projections in
  bfloat16 and the losses match the same launch with `--cpu` within
  rtol = atol = 5e-3 (bfloat16 keeps 8 significant bits, a relative step of
  about 4e-3; the CPU's autocast lists differ a little from the device's,
  which follow CUDA's);
- with `--num_processes 1` and no mixed precision, the losses match the
  `--cpu` launch within rtol = atol = 1e-5 (float32 on both).

Each launch is a real `accelerate launch` subprocess with a timeout, in an
empty HF_HOME so that no user configuration changes what it does; a test's
device and CPU launches run side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_pjrt

accelerate = pytest.importorskip("accelerate")
pytest.importorskip("transformers")

DEV = torch_pjrt.settings().device_name
SCRIPT = Path(__file__).parent / "scripts" / "accelerate_train.py"


def test_accelerator_picks_the_device():
    from accelerate.state import AcceleratorState

    # as in a fresh process: forget the state an earlier Trainer left behind
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        accelerator = accelerate.Accelerator()
        assert accelerator.device.type == DEV
        model = accelerator.prepare(torch.nn.Linear(4, 2))
        assert model.weight.device.type == DEV
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


_NO_IMPORT = """
import sys
import accelerate
device = accelerate.Accelerator().device
print(device.type, "torch_pjrt" in sys.modules)
"""


@pytest.mark.parametrize("autoload", ["1", "0", "maybe"])
def test_autoload_setting_picks_the_device_without_an_import(autoload):
    """A script that never imports torch_pjrt: with TORCH_PJRT_AUTOLOAD=1,
    torch's backend autoload imports it and Accelerator() picks the device;
    unset or 0, nothing of torch-pjrt loads; another value is an error that
    names the setting."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_PJRT_AUTOLOAD"}
    env["TORCH_PJRT_AUTOLOAD"] = autoload
    proc = subprocess.run([sys.executable, "-c", _NO_IMPORT], env=env, capture_output=True,
                          text=True, timeout=180)
    if autoload == "maybe":
        assert proc.returncode != 0 and "TORCH_PJRT_AUTOLOAD='maybe'" in proc.stderr, proc.stderr[-2000:]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = f"{DEV} True" if autoload == "1" else "cpu False"
    assert proc.stdout.split("\n")[-2] == expected, proc.stdout


def _launch(tmp_path, *runs: tuple[str, ...]) -> list[dict]:
    """Runs `accelerate launch` once per tuple of flags, all at once (each
    mostly imports and compiles, one core apiece), and returns the RESULT
    each printed."""
    home = tmp_path / "hf_home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HF_HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-m", "accelerate.commands.launch",
                               "--num_processes", "1", "--num_machines", "1",
                               "--dynamo_backend", "no", *flags, str(SCRIPT)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for flags in runs]
    results = []
    try:
        for flags, proc in zip(runs, procs):
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, f"{flags}:\n{out[-3000:]}{err[-3000:]}"
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            assert len(lines) == 1, f"{flags}:\n{out[-3000:]}{err[-3000:]}"
            results.append(json.loads(lines[0][len("RESULT "):]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _check(result: dict, device: str, precision: str, dtype: str) -> torch.Tensor:
    assert result["device"] == result["batch_device"] == device
    assert result["mixed_precision"] == precision
    assert result["q_proj_dtypes"] == [dtype]
    assert result["fallback_ops"] == {}
    return torch.tensor(result["losses"])


def test_launch_bf16_matches_cpu(tmp_path):
    dev, cpu = _launch(tmp_path, ("--mixed_precision", "bf16"),
                       ("--mixed_precision", "bf16", "--cpu"))
    dev = _check(dev, DEV, "bf16", "torch.bfloat16")
    cpu = _check(cpu, "cpu", "bf16", "torch.bfloat16")
    print(f"bf16 losses: {dev.tolist()}; max |diff| from cpu: {(dev - cpu).abs().max().item():.2e}")
    assert dev[-1] < dev[0] - 1.0  # it trains
    torch.testing.assert_close(dev, cpu, rtol=5e-3, atol=5e-3)


def test_launch_fp32_matches_cpu(tmp_path):
    dev, cpu = _launch(tmp_path, ("--mixed_precision", "no"), ("--mixed_precision", "no", "--cpu"))
    dev = _check(dev, DEV, "no", "torch.float32")
    cpu = _check(cpu, "cpu", "no", "torch.float32")
    print(f"fp32 losses: {dev.tolist()}; max |diff| from cpu: {(dev - cpu).abs().max().item():.2e}")
    assert dev[-1] < dev[0] - 1.0
    torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)
