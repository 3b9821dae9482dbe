"""torch.special's orthogonal polynomials on tpu (csrc/ops/polynomials.cc):
every family against CPU PyTorch over degrees that take each path (n < 0,
the exact points, the closed forms, the recurrence), in strict eager,
fused eager and a compiled graph, with no CPU fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
FAMILIES = sorted(name for name in dir(torch.special) if "_polynomial_" in name)


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    # No NaN x: torch's CPU kernels return an uninitialized value for it in
    # most families (the recurrence never runs, and its result is never set).
    x = torch.cat([torch.tensor([1.0, -1.0, 0.0, 0.5, 2.0, -3.0, 0.25]),
                   torch.randn(40, generator=g) * 1.5, torch.rand(20, generator=g)]).to(dtype)
    n = torch.randint(-2, 16, (x.numel(),), generator=g).to(dtype)
    n[:7] = torch.tensor([3, 4, 5, 9, 12, 0, 2])
    return x, n


def test_all_twelve_families_are_covered():
    assert len(FAMILIES) == 12, FAMILIES


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", FAMILIES)
def test_polynomial_matches_cpu(name, dtype):
    fn = getattr(torch.special, name)
    x, n = _inputs(dtype)
    torch_pjrt.reset_metrics()
    got = fn(x.to(TPU), n.to(TPU)).cpu()
    expected = fn(x, n)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-4 if dtype == torch.float32
                               else 1e-10, atol=1e-5 if dtype == torch.float32 else 1e-12)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "legendre_polynomial_p",
                                  "hermite_polynomial_h"])
def test_integer_inputs_promote_and_out_is_written(name):
    fn = getattr(torch.special, name)
    x = torch.tensor([[0, 1, 2], [-1, 3, 1]])
    n = torch.tensor([2, 3, 5])
    expected = fn(x, n)
    assert fn(x.to(TPU), n.to(TPU)).dtype == expected.dtype == torch.float32
    out = torch.empty(0, device=TPU)
    fn(x.to(TPU), n.to(TPU), out=out)
    torch.testing.assert_close(out.cpu(), expected)


def test_scalar_degree_and_hermite_limit():
    x = torch.linspace(-2, 2, 9)
    for n in (0, 1, 7, 129):
        for name in ("hermite_polynomial_h", "hermite_polynomial_he"):
            fn = getattr(torch.special, name)
            torch.testing.assert_close(fn(x.to(TPU), n).cpu(), fn(x, n), equal_nan=True,
                                       rtol=1e-4, atol=1e-4)


def test_bfloat16_is_refused_like_cpu():
    x = torch.ones(3, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError):
        torch.special.chebyshev_polynomial_t(x, x)
    with pytest.raises(NotImplementedError, match="BFloat16"):
        torch.special.chebyshev_polynomial_t(x.to(TPU), x.to(TPU))


def test_fused_and_compiled_match_cpu():
    x, n = _inputs(torch.float32)

    def f(x, n):
        return (torch.special.legendre_polynomial_p(x, n)
                + torch.special.shifted_chebyshev_polynomial_w(x, n) * 0.5)

    expected = f(x, n)
    with torch_pjrt.eager_mode("fused"):
        got = f(x.to(TPU), n.to(TPU)).cpu()
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-4, atol=1e-5)
    compiled = torch.compile(f, backend="tpu")
    torch.testing.assert_close(compiled(x.to(TPU), n.to(TPU)).cpu(), expected, equal_nan=True,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_at_negative_points_and_poles(n):
    # XLA's own polygamma is wrong below zero from n = 2 on and NaN at the
    # poles; torch gives (-1)^(n+1) infinity there.
    x = torch.tensor([-8.48, -3.3, -0.5, -1.0, -2.0, 0.0, 1.5, -7.9, -0.01, -100.2])
    expected = torch.polygamma(n, x)
    got = torch.polygamma(n, x.to(TPU)).cpu()
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-3, atol=1e-4)
    got64 = torch.polygamma(n, x.double().to(TPU)).cpu()
    torch.testing.assert_close(got64, torch.polygamma(n, x.double()), equal_nan=True,
                               rtol=1e-9, atol=1e-9)
