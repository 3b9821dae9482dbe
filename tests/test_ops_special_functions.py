"""erfc, exp2, ndtri, erfcx, zeta, i1/i1e, signbit, frexp, nextafter and gcd
on tpu (csrc/ops/special_functions.cc) against CPU PyTorch, edge values
included (subnormals, signed zeros, infinities, poles), with no fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
INF, NAN = float("inf"), float("nan")


def _same(expected, got, rtol=1e-5, atol=1e-6):
    if isinstance(expected, tuple):
        for e, g in zip(expected, got):
            _same(e, g, rtol, atol)
        return
    got = got.cpu()
    assert got.dtype == expected.dtype
    if expected.is_floating_point():
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=rtol, atol=atol)
    else:
        assert torch.equal(got, expected), (got, expected)


def _run(fn, *inputs, **tol):
    torch_pjrt.reset_metrics()
    _same(fn(*inputs), fn(*[t.to(TPU) for t in inputs]), **tol)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


EDGES = torch.tensor([0.0, -0.0, 1.5, -3.0, INF, -INF, NAN, 1e-40, -3e-42, 1.4e-45, 0.3, 2.5])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_frexp_including_subnormals(dtype):
    _run(torch.frexp, EDGES.to(dtype))
    if dtype == torch.float64:
        _run(torch.frexp, torch.tensor([1e-310, -4.9e-324], dtype=dtype))


def test_signbit_sees_negative_zero_and_integers():
    _run(torch.signbit, torch.tensor([-0.0, 0.0, -1.0, NAN, -NAN, -INF]))
    _run(torch.signbit, torch.tensor([-1, 0, 2]))
    _run(torch.signbit, torch.tensor([True, False]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nextafter_steps_one_ulp(dtype):
    x = torch.tensor([0.0, 1.0, -1.0, INF, 0.0, 2.0, NAN, -0.0]).to(dtype)
    y = torch.tensor([1.0, 0.0, -2.0, 0.0, -1.0, 2.0, 1.0, 1.0]).to(dtype)
    _run(torch.nextafter, x, y, rtol=0, atol=0)
    out = torch.empty(0, device=TPU, dtype=dtype)
    torch.nextafter(x.to(TPU), y.to(TPU), out=out)
    _same(torch.nextafter(x, y), out, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_gcd_and_lcm(dtype):
    a = torch.tensor([0, -4, 6, 7, 12, 1071, -9], dtype=dtype)
    b = torch.tensor([0, 6, -4, 0, 18, 462, -6], dtype=dtype)
    _run(torch.gcd, a, b)
    _run(torch.lcm, a, b)
    _run(torch.gcd, torch.tensor([-(2 ** 63), 10]), torch.tensor([6, 4]))  # as torch wraps


def test_unary_special_functions():
    y = torch.tensor([-30.0, -5, -1, 0, 0.5, 3, 10, 26, 30, 1e4])
    _run(torch.special.erfcx, y)
    _run(torch.special.erfcx, y.double(), rtol=1e-12, atol=1e-12)
    _run(torch.erfc, y)
    _run(torch.special.i1e, y)
    _run(torch.special.i1, torch.tensor([-5.0, 0, 0.3, 10, 80]), rtol=1e-5, atol=1e-5)
    _run(torch.exp2, torch.tensor([0.0, 3, -2, 0.5, 100]))
    _run(torch.exp2, torch.tensor([0, 3, -2]))
    p = torch.tensor([1e-6, 1e-3, 0.2, 0.5, 0.97, 1 - 1e-6, 0.0, 1.0, -0.5])
    _run(torch.special.ndtri, p)


def test_zeta_poles_and_domain():
    x = torch.tensor([2.0, 0.5, 1.0, 3.0, 3.0, 2.0, 4.5, 2.5])
    q = torch.tensor([1.0, 1.0, 1.0, -2.0, -2.5, 0.0, 3.2, -1.5])
    _run(torch.special.zeta, x, q)
    _run(lambda t: torch.special.zeta(t, 2.0), torch.tensor([1.5, 2.0, 3.0]))
    _run(torch.special.zeta, torch.tensor([0, 0, 1, -1, 2]), torch.tensor([0, -1, 0, 1, 0]))


def test_in_place_and_integer_inputs():
    x = torch.tensor([0.1, 0.4, 0.9])
    t = x.to(TPU)
    t.erfc_()
    _same(x.erfc(), t)
    _run(torch.erfc, torch.tensor([0, 1, 2]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_modified_bessel_i0_i1_both_series(dtype):
    # The power series up to |x| = 30, the asymptotic one past it.
    x = torch.tensor([0.0, 0.5, -3.0, 7.3, 29.9, 30.0, 31.0, -80.0, 88.0, -0.01, 15.0, 1e-30])
    x = x.to(dtype)
    tol = {"rtol": 1e-6, "atol": 0} if dtype == torch.float32 else {"rtol": 1e-13, "atol": 0}
    for fn in (torch.i0, torch.special.i0e, torch.special.modified_bessel_i0,
               torch.special.modified_bessel_i1):
        _run(fn, x, **tol)
    if dtype == torch.float64:
        _run(torch.i0, torch.tensor([700.0], dtype=dtype), rtol=1e-13, atol=0)
