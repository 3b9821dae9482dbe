"""torch.compile() with no backend named: graphs on the tpu device go to the
tpu backend (inductor's Pallas code generator cannot run here), graphs on
the CPU still go to inductor, and TORCH_PJRT_INDUCTOR=inductor leaves
inductor alone."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

import torch_pjrt
from torch_pjrt._compile import compile_counters

NAME = torch_pjrt.settings().device_name


def _routed() -> int:
    return compile_counters()["graphs_routed_from_inductor"]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


@pytest.mark.parametrize("kwargs", [{}, {"mode": "reduce-overhead"}, {"mode": "max-autotune"},
                                    {"options": {"triton.cudagraphs": False}}, {"dynamic": True}])
def test_default_compile_trains_like_cpu(kwargs):
    torch._dynamo.reset()
    cpu, dev = _model(), _model().to(NAME)
    x = torch.randn(8, 16)
    torch_pjrt.reset_metrics()  # also zeroes the compile counters
    before = _routed()
    compiled = torch.compile(dev, **kwargs)
    got = compiled(x.to(NAME))
    got.square().mean().backward()
    expected = cpu(x)
    expected.square().mean().backward()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    assert _routed() > before
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_graph_that_only_makes_device_tensors_is_routed():
    torch._dynamo.reset()
    before = _routed()
    fn = torch.compile(lambda n: torch.arange(n, device=NAME).float().cumsum(0) * 2)
    torch.testing.assert_close(fn(6).cpu(), torch.arange(6).float().cumsum(0) * 2)
    assert _routed() == before + 1


def test_registered_inductor_backend_is_routed_too():
    torch._dynamo.reset()
    before = _routed()
    model = _model().to(NAME)
    x = torch.randn(3, 16)
    fn = torch._dynamo.optimize("inductor")(model)
    torch.testing.assert_close(fn(x.to(NAME)).cpu(), _model()(x), rtol=1e-5, atol=1e-5)
    assert _routed() > before


def test_cpu_graphs_still_go_to_inductor(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    before = _routed()
    from torch._dynamo.utils import counters

    counters.clear()
    fn = torch.compile(lambda a, b: (a * b).sin() + 1)
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(fn(a, b), (a * b).sin() + 1)
    assert _routed() == before
    assert counters["inductor"], "inductor did not compile the CPU graph"


_OPT_OUT = """
import json, torch, torch_pjrt
from torch_pjrt._compile import compile_counters
model = torch.nn.Linear(4, 4).to("{name}")
try:
    torch.compile(model)(torch.randn(2, 4, device="{name}")).cpu()
    outcome = "ran"
except Exception as error:
    outcome = type(error).__module__ + "." + type(error).__name__
print(json.dumps({{"routed": compile_counters()["graphs_routed_from_inductor"], "outcome": outcome}}))
"""


def test_opt_out_leaves_tpu_graphs_to_inductor():
    env = dict(os.environ, TORCH_PJRT_INDUCTOR="inductor")
    run = subprocess.run([sys.executable, "-c", _OPT_OUT.format(name=NAME)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["routed"] == 0
    # inductor's own code generator for "tpu" (Pallas) ran, or failed in inductor.
    assert report["outcome"] == "ran" or report["outcome"].startswith("torch._inductor"), report


def test_bad_setting_names_the_variable():
    env = dict(os.environ, TORCH_PJRT_INDUCTOR="pallas")
    run = subprocess.run([sys.executable, "-c", "import torch_pjrt; torch_pjrt.settings()"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "TORCH_PJRT_INDUCTOR='pallas' is not one of tpu, inductor" in run.stderr


def test_aot_inductor_is_left_to_inductor(monkeypatch):
    """AOTInductor makes a deployable package, which the tpu backend does
    not: its graphs are not routed even when they hold device tensors."""
    from torch_pjrt._compile import default_backend

    calls = []
    monkeypatch.setattr(default_backend, "_to_tpu", lambda gm, inputs: calls.append("tpu"))
    routed = default_backend._routed_wrapper_call(
        lambda self, gm, inputs, **kw: calls.append(type(self).__name__))
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    inputs = [torch.randn(2, device=NAME)]
    routed(torch._TorchCompileAOTInductorWrapper("default", {}, False), gm, inputs)
    routed(torch._TorchCompileInductorWrapper("default", {}, False), gm, inputs)
    assert calls == ["_TorchCompileAOTInductorWrapper", "tpu"]
