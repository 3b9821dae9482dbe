"""LU factorisation and what torch builds on it (csrc/ops/lu.cc): lu_factor,
lu, lu_unpack, lu_solve (left/right, adjoint), inv, solve (matrix, vector,
right, broadcast), det and slogdet, real and complex, with gradients, all
against CPU PyTorch and with no CPU fallback; singular matrices report as
the CPU does."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
DTYPES = [torch.float32, torch.float64, torch.complex64]


def _close(expected, got, dtype):
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    if isinstance(expected, torch.Tensor):
        expected, got = (expected,), (got,)
    for e, g in zip(expected, got):
        g = g.cpu()
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=tol, atol=tol, equal_nan=True)


def _inputs(dtype, *shape):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(len(shape)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 5), (5, 2), (1, 0, 0)])
def test_factor_lu_and_unpack_match_cpu(shape, dtype):
    a = _inputs(dtype, *shape)
    torch_pjrt.reset_metrics()
    _close(torch.linalg.lu_factor_ex(a), torch.linalg.lu_factor_ex(a.to(TPU)), dtype)
    _close(torch.linalg.lu(a), torch.linalg.lu(a.to(TPU)), dtype)
    lu, piv = torch.linalg.lu_factor(a)
    _close(torch.lu_unpack(lu, piv), torch.lu_unpack(lu.to(TPU), piv.to(TPU)), dtype)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_solves_inverse_and_determinants_match_cpu(dtype):
    a, b = _inputs(dtype, 2, 4, 4), _inputs(dtype, 2, 4, 3)
    at, bt = a.to(TPU), b.to(TPU)
    torch_pjrt.reset_metrics()
    lu, piv = torch.linalg.lu_factor(a)
    for left in (True, False):
        for adjoint in (True, False):
            rhs = b if left else b.mT
            _close(torch.linalg.lu_solve(lu, piv, rhs, left=left, adjoint=adjoint),
                   torch.linalg.lu_solve(lu.to(TPU), piv.to(TPU), rhs.to(TPU), left=left,
                                         adjoint=adjoint), dtype)
    _close(torch.linalg.inv(a), torch.linalg.inv(at), dtype)
    _close(torch.linalg.solve(a, b), torch.linalg.solve(at, bt), dtype)
    _close(torch.linalg.solve(a, b[..., 0]), torch.linalg.solve(at, bt[..., 0]), dtype)
    _close(torch.linalg.solve(a, b[0, :, 0]), torch.linalg.solve(at, bt[0, :, 0]), dtype)
    _close(torch.linalg.solve(a, b.mT, left=False), torch.linalg.solve(at, bt.mT, left=False), dtype)
    _close(torch.linalg.solve(a[0], b), torch.linalg.solve(at[0], bt), dtype)
    _close(torch.linalg.det(a), torch.linalg.det(at), dtype)
    _close(torch.linalg.slogdet(a), torch.linalg.slogdet(at), dtype)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("fn", ["det", "slogdet", "solve", "inv"])
def test_gradients_match_cpu(fn, dtype):
    a, b = _inputs(dtype, 2, 4, 4), _inputs(dtype, 2, 4, 3)
    loss = {
        "det": lambda x: torch.linalg.det(x).abs().sum(),
        "slogdet": lambda x: torch.linalg.slogdet(x)[1].sum(),
        "solve": lambda x: torch.linalg.solve(x, b.to(x.device)).abs().sum(),
        "inv": lambda x: torch.linalg.inv(x).abs().sum(),
    }[fn]
    x = a.clone().requires_grad_()
    loss(x).backward()
    xt = a.to(TPU).requires_grad_()
    loss(xt).backward()
    _close(x.grad, xt.grad, dtype)


def test_conjugate_views_reach_matmul_resolved():
    a, b = _inputs(torch.complex64, 3, 3), _inputs(torch.complex64, 3, 4)
    at, bt = a.to(TPU), b.to(TPU)
    _close(a.mH @ b, at.mH @ bt, torch.complex64)
    _close(a.conj() @ b, at.conj() @ bt, torch.complex64)
    _close(torch._neg_view(a) @ b, torch._neg_view(at) @ bt, torch.complex64)


def test_singular_matrices_report_like_cpu():
    s = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    _close(torch.linalg.lu_factor_ex(s), torch.linalg.lu_factor_ex(s.to(TPU)), torch.float32)
    _close(torch.linalg.det(s), torch.linalg.det(s.to(TPU)), torch.float32)
    _close(torch.linalg.slogdet(s), torch.linalg.slogdet(s.to(TPU)), torch.float32)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(s.to(TPU))
    with pytest.raises(RuntimeError):
        torch.linalg.inv(torch.ones(2, 3).to(TPU))
    with pytest.raises(RuntimeError):
        torch.linalg.lu_factor(torch.ones(2, 2).to(TPU), pivot=False)
