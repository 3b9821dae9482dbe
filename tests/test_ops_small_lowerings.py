"""Ops that fell back to the CPU for want of a small lowering: angle, logit
of integers, addbmm, the shrink backward ops, rrelu (train and eval, with
its backward) and batch norm's newer entry points (_native_batch_norm_legit,
_batch_norm_with_update), against CPU PyTorch with no fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_pjrt.reset_metrics()
    yield
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def _same(expected, got, tol=1e-5):
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("x", [
    torch.tensor([0.0, -0.0, 1.5, -2.0, NAN, INF, -INF]),
    torch.tensor([-1, 0, 2]),
    torch.tensor([True, False]),
    torch.tensor([1 + 1j, -2 + 0j, -1j, 0j], dtype=torch.complex64),
], ids=["float", "int", "bool", "complex"])
def test_angle(x):
    _same(torch.angle(x), torch.angle(x.to(TPU)))


@pytest.mark.parametrize("eps", [None, 0.1])
def test_logit_of_integers_and_bool_gives_floats(eps):
    for x in (torch.tensor([0, 1, 2, -1]), torch.tensor([True, False])):
        _same(torch.logit(x, eps), torch.logit(x.to(TPU), eps))


@pytest.mark.parametrize("self_shape", [(2, 3), (3,)])
def test_addbmm_matches_cpu(self_shape):
    g = torch.Generator().manual_seed(0)
    s, b1, b2 = (torch.randn(*d, generator=g) for d in (self_shape, (4, 2, 5), (4, 5, 3)))
    _same(torch.addbmm(s, b1, b2, beta=0.5, alpha=2),
          torch.addbmm(s.to(TPU), b1.to(TPU), b2.to(TPU), beta=0.5, alpha=2), tol=1e-4)
    with pytest.raises(RuntimeError):
        torch.addbmm(s.to(TPU), b1.to(TPU), b2[:, :4].to(TPU))


@pytest.mark.parametrize("fn", [
    lambda t: F.hardshrink(t, 0.3), lambda t: F.softshrink(t, 0.3),
    lambda t: F.rrelu(t, 0.1, 0.3, training=False),
], ids=["hardshrink", "softshrink", "rrelu-eval"])
def test_activation_and_its_gradient(fn):
    x = torch.randn(16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    xt = x.detach().to(TPU).requires_grad_()
    y, yt = fn(x), fn(xt)
    _same(y.detach(), yt.detach())
    _same(torch.autograd.grad(y.sum() * 2, x)[0], torch.autograd.grad(yt.sum() * 2, xt)[0])


def test_rrelu_training_draws_slopes_on_the_device_and_backpropagates_them():
    x = torch.randn(2000, generator=torch.Generator().manual_seed(2)).to(TPU).requires_grad_()
    y = F.rrelu(x, 0.1, 0.3, training=True)
    (grad,) = torch.autograd.grad(y.sum(), x)
    xc, yc, gc = x.detach().cpu(), y.detach().cpu(), grad.cpu()
    slopes = (yc / xc)[xc < 0]
    assert slopes.min() >= 0.1 and slopes.max() < 0.3 and slopes.std() > 0.03
    assert torch.equal(yc[xc > 0], xc[xc > 0])
    torch.testing.assert_close(gc[xc < 0], slopes)
    assert bool((gc[xc > 0] == 1).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_batch_norm_entry_points_update_running_stats(dtype):
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(*d, generator=g).to(dtype) for d in ((4, 3, 5), (3,), (3,)))
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    cases = [
        lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5),
        lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, False, 0.1, 1e-5),
        lambda x, w, b, rm, rv: torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5),
        lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
    ]
    for case in cases:
        stats = [torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)]
        device_stats = [t.to(TPU) for t in stats]
        expected = case(x, w, b, *stats)
        got = case(x.to(TPU), w.to(TPU), b.to(TPU), *device_stats)
        _same(expected[0], got[0], tol)
        # Saved statistics: float32 for bfloat16 input, as CUDA keeps them.
        for e, d in zip(expected[1:3], got[1:3]):
            torch.testing.assert_close(d.cpu().to(e.dtype), e, rtol=tol, atol=tol)
        if len(expected) == 4:
            _same(expected[3], got[3])
        for e, d in zip(stats, device_stats):
            _same(e, d, tol)


@pytest.mark.parametrize("pad", [(-4, 5, 0, 0), (5, -4, -4, 3), (8, -1, -1, -3), (-2, -2, 1, 1)])
def test_replicate_padding_that_crops_past_an_edge(pad):
    # torch clamps every output position into the input: a crop past one
    # edge leaves copies of the other edge.
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(4), requires_grad=True)
    xt = x.detach().to(TPU).requires_grad_()
    y, yt = F.pad(x, pad, mode="replicate"), F.pad(xt, pad, mode="replicate")
    _same(y.detach(), yt.detach())
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(5))
    _same(torch.autograd.grad((y * w).sum(), x)[0], torch.autograd.grad((yt * w.to(TPU)).sum(), xt)[0])


def _input_grad(fn, x, *rest):
    grads = []
    for device in ("cpu", TPU):
        leaf = x.clone().to(device).requires_grad_()
        out = fn(leaf, *[t.to(device) for t in rest])
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(6)).to(device)
        grads.append(torch.autograd.grad((out * w).sum(), leaf)[0].cpu())
    return grads


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss_gradient(p, reduction):
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(4, 5, generator=g), torch.rand(5, generator=g)
    y = torch.tensor([0, 3, 4, 1])
    want, got = _input_grad(lambda a, b, c: F.multi_margin_loss(a, b, p=p, margin=0.7, weight=c,
                                                                reduction=reduction), x, y, w)
    _same(want, got)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_gradient(reduction):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(8))
    # Lists end at the first -1; a class may be listed twice.
    t = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, -1, 0], [0, 1, 2, 3, 4], [-1, 0, 0, 0, 0]])
    want, got = _input_grad(lambda a, b: F.multilabel_margin_loss(a, b, reduction=reduction), x, t)
    _same(want, got)
