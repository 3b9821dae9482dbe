"""grid_sample (grid_sampler_2d/3d and their backward, csrc/ops/grid_sampler.cc)
on tpu against CPU PyTorch: every interpolation and padding mode with and
without align_corners, grid points far outside the input and on its
borders, gradients for input and grid, bfloat16 (where the CPU rounds its
intermediates), empty batches and the CPU's errors. Every tpu call must run
natively (no CPU fallback)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"
PADDINGS = ("zeros", "border", "reflection")
FWD = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
GRAD = dict(rtol=1e-4, atol=1e-4)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _grid(*shape, seed=0):
    # Mostly inside [-1, 1], some far outside (several reflections), some
    # exactly on the borders.
    g = torch.rand(*shape, generator=_gen(seed)) * 3.2 - 1.6
    flat = g.view(-1)
    flat[::7] = flat[::7] * 2.5
    flat[3::11] = 1.0
    flat[5::13] = -1.0
    return g


def _check(x, grid, grad=True, dtype=torch.float32, **kwargs):
    x, grid = x.to(dtype), grid.to(dtype)
    xc, gc = x.clone().requires_grad_(grad), grid.clone().requires_grad_(grad)
    xt, gt = x.to(TPU).requires_grad_(grad), grid.to(TPU).requires_grad_(grad)
    torch_pjrt.reset_metrics()
    expected = F.grid_sample(xc, gc, **kwargs)
    got = F.grid_sample(xt, gt, **kwargs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), **FWD[dtype])
    if grad:
        go = torch.randn(expected.shape, generator=_gen(9))
        expected_grads = torch.autograd.grad(expected, (xc, gc), go)
        got_grads = torch.autograd.grad(got, (xt, gt), go.to(TPU))
        for e, g in zip(expected_grads, got_grads, strict=True):
            torch.testing.assert_close(g.cpu(), e, **GRAD)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d_matches_cpu_with_gradients(mode):
    x = torch.randn(2, 3, 5, 7, generator=_gen(1))
    grid = _grid(2, 4, 6, 2)
    for padding, align in itertools.product(PADDINGS, (False, True)):
        _check(x, grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_matches_cpu_with_gradients(mode):
    x = torch.randn(2, 2, 4, 5, 6, generator=_gen(2))
    grid = _grid(2, 3, 2, 4, 3, seed=3)
    for padding, align in itertools.product(PADDINGS, (False, True)):
        _check(x, grid, mode=mode, padding_mode=padding, align_corners=align)


def test_single_pixel_dims():
    # align_corners with a size-1 dim leaves reflection nothing to reflect in.
    for padding in PADDINGS:
        _check(torch.randn(1, 2, 1, 4, generator=_gen(4)), _grid(1, 3, 3, 2, seed=5), mode="bilinear",
               padding_mode=padding, align_corners=True)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_bfloat16_matches_cpu(mode):
    # The CPU rounds coordinates and weights to bfloat16 at each step; the
    # tpu rounds at the same steps (a nearest pixel may differ otherwise).
    x = torch.randn(2, 3, 5, 20, generator=_gen(6)) * 3
    grid = _grid(2, 13, 10, 2, seed=7)
    for padding, align in zip(PADDINGS, (False, True, False)):
        _check(x, grid, grad=False, dtype=torch.bfloat16, mode=mode, padding_mode=padding, align_corners=align)
    if mode != "bicubic":
        _check(torch.randn(2, 3, 5, 8, 9, generator=_gen(8)) * 3, _grid(2, 4, 3, 5, 3, seed=9), grad=False,
               dtype=torch.bfloat16, mode=mode, align_corners=False)


@pytest.mark.parametrize("x,grid", [
    (torch.zeros(0, 3, 4, 5), torch.zeros(0, 3, 2, 2)),
    (torch.zeros(2, 3, 4, 5), torch.zeros(2, 0, 2, 2)),
    (torch.zeros(0, 2, 3, 4, 5), torch.zeros(0, 2, 2, 2, 3)),
], ids=["empty_batch_2d", "empty_grid_2d", "empty_batch_3d"])
def test_empty(x, grid):
    _check(x, grid, mode="bilinear", align_corners=False)


@pytest.mark.parametrize("call,error", [
    (lambda x, g: torch.grid_sampler_3d(x.unsqueeze(2), torch.zeros(2, 1, 3, 3, 3, device=x.device), 2, 0, False),
     RuntimeError),
    (lambda x, g: torch.grid_sampler_2d(x, g[:1], 0, 0, False), RuntimeError),
    (lambda x, g: torch.grid_sampler_2d(x, torch.cat([g, g[..., :1]], -1), 0, 0, False), RuntimeError),
    (lambda x, g: torch.grid_sampler_2d(x[:, :, :0], g, 0, 0, False), RuntimeError),
    (lambda x, g: torch.grid_sampler_2d(x.long(), g.long(), 0, 0, False), NotImplementedError),
], ids=["bicubic_3d", "batch_mismatch", "grid_last_dim", "empty_input", "integer_input"])
def test_errors_like_cpu(call, error):
    x, g = torch.randn(2, 3, 4, 5, generator=_gen(10)), _grid(2, 3, 3, 2)
    with pytest.raises(error):
        call(x, g)
    with pytest.raises(error):
        call(x.to(TPU), g.to(TPU)).cpu()
