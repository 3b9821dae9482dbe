"""GradScaler on tpu: its two ops run on the device (no CPU fallback) and
follow CPU PyTorch's results."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name
_unscale = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_
_update = torch.ops.aten._amp_update_scale_


@pytest.fixture(autouse=True)
def fresh_metrics():
    torch_pjrt.reset_metrics()  # fallbacks counted by earlier tests in this process


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    with torch_pjrt.eager_mode(request.param):
        yield request.param


def _no_fallback():
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("case", ["finite", "inf", "nan", "already_found", "empty"])
def test_unscale_and_check_matches_cpu(mode, case):
    g = torch.Generator().manual_seed(0)
    grads = [] if case == "empty" else [torch.randn(5, 3, generator=g), torch.randn(7, generator=g)]
    if case == "inf":
        grads[1][2] = float("inf")
    if case == "nan":
        grads[0][1, 1] = float("nan")
    found = torch.tensor([1.0 if case == "already_found" else 0.0])
    inv_scale = torch.tensor([0.25])
    dev_grads = [t.to(NAME) for t in grads]
    dev_found = found.to(NAME)
    _unscale(grads, found, inv_scale)
    _unscale(dev_grads, dev_found, inv_scale.to(NAME))
    assert torch.equal(dev_found.cpu(), found)
    for d, c in zip(dev_grads, grads):
        torch.testing.assert_close(d.cpu(), c, equal_nan=True)
    _no_fallback()


@pytest.mark.parametrize("case", ["count", "grow", "grow_to_inf", "backoff"])
def test_update_scale_matches_cpu(mode, case):
    scale = torch.tensor([3.0e38 if case == "grow_to_inf" else 1024.0])
    tracker = torch.tensor([2 if case in ("grow", "grow_to_inf") else 0], dtype=torch.int32)
    found = torch.tensor([1.0 if case == "backoff" else 0.0])
    dev = [t.to(NAME) for t in (scale, tracker, found)]
    _update(scale, tracker, found, 2.0, 0.5, 3)
    _update(dev[0], dev[1], dev[2], 2.0, 0.5, 3)
    assert torch.equal(dev[0].cpu(), scale) and torch.equal(dev[1].cpu(), tracker)
    _no_fallback()


def test_amp_training_loop_scales_like_cpu(mode):
    """bf16 autocast, GradScaler with growth every 3 steps and an inf loss at
    step 4: the same scale after every step as on the CPU."""
    results = {}
    for where in ("cpu", NAME):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to(where)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler(where, init_scale=2.0 ** 16, growth_interval=3)
        x, y = torch.randn(8, 16).to(where), torch.randn(8, 4).to(where)
        scales = []
        for step in range(10):
            with torch.autocast(where, dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss * (float("inf") if step == 4 else 1.0)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        results[where] = scales, [p.detach().cpu() for p in model.parameters()]
    assert results[NAME][0] == results["cpu"][0]
    # bf16 autocast rounds differently on the two backends: close, not equal.
    for d, c in zip(results[NAME][1], results["cpu"][1]):
        torch.testing.assert_close(d, c, rtol=1e-2, atol=1e-3)
    _no_fallback()
    assert torch_pjrt.metrics()["decomposed_ops"].get("aten::_amp_update_scale_", 0) >= 10
