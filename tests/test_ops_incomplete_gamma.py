"""torch.igamma and torch.igammac (csrc/ops/incomplete_gamma.cc) against CPU
PyTorch: every combination of edge values (0, -0, negative, infinities,
NaN), the series / continued fraction / uniform-expansion regions, large a,
broadcasting, type promotion, in-place and out= forms, with no fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
INF, NAN = float("inf"), float("nan")


def _run(fn, a, x, rtol, atol):
    torch_pjrt.reset_metrics()
    expected = fn(a, x)
    got = fn(a.to(TPU), x.to(TPU)).cpu()
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_float64_edges_regions_and_large_a(fn):
    # Every pair of edge values (CPU's order of cases) and points in each
    # region: the series (x < a + 1), the continued fraction, the uniform
    # expansion (a > 200, x near a) and its borders; then large a with x
    # within a few sqrt(a) of a, where the series would need thousands of steps.
    values = [0.0, -0.0, -1.0, INF, -INF, NAN, 1e-3, 0.5, 1.0, 2.5, 7.0, 30.0, 150.0, 199.0,
              201.0, 240.0, 260.0, 400.0, 1e3, 1.05e3, 1e4]
    v = torch.tensor(values, dtype=torch.float64)
    a = [v.repeat_interleave(len(values)), torch.tensor([1e5, 1e5, 1e7, 1e7, 1e10, 1e10, 1e5, 1e5])]
    x = [v.repeat(len(values)), torch.tensor([1e5 - 400, 1e5 + 1, 1e7 + 3e3, 1e7 - 10, 1e10,
                                              1e10 - 2e5, 5e4, 2e5])]
    _run(fn, torch.cat(a).double(), torch.cat(x).double(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_float32_broadcasting(fn):
    torch.manual_seed(0)
    _run(fn, torch.rand(6, 1) * 18, torch.rand(5) * 18, rtol=2e-5, atol=1e-6)


def test_bfloat16_and_type_promotion():
    torch.manual_seed(0)
    a, x = torch.rand(6, 1) * 18, torch.rand(5) * 18
    _run(torch.igamma, a.bfloat16(), x.bfloat16(), rtol=1.6e-2, atol=1e-2)
    _run(torch.igammac, torch.tensor([1.0, 2.5, 4.0]), torch.tensor([1, 2, 9]), rtol=2e-5,
         atol=1e-6)  # float32
    _run(torch.igamma, torch.tensor([True, False, True]), torch.tensor([0.5, 1.0, 2.0]),
         rtol=2e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="igamma_cpu"):
        torch.igamma(torch.tensor([1, 2], device=TPU), torch.tensor([1, 2], device=TPU))


def test_in_place_and_out():
    a = torch.tensor([0.5, 3.0, 12.0])
    x = torch.tensor([0.2, 3.5, 9.0])
    t = a.to(TPU)
    t.igamma_(x.to(TPU))
    torch.testing.assert_close(t.cpu(), torch.igamma(a, x), rtol=2e-5, atol=1e-6)
    out = torch.empty(3, device=TPU)
    torch.igammac(a.to(TPU), x.to(TPU), out=out)
    torch.testing.assert_close(out.cpu(), torch.igammac(a, x), rtol=2e-5, atol=1e-6)
