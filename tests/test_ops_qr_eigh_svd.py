"""Householder QR (csrc/ops/householder.cc), Jacobi eigh and SVD
(csrc/ops/jacobi.cc), and the Cholesky and triangular solves
(csrc/ops/linalg.cc) on tpu against CPU PyTorch, real and complex, with
gradients and no CPU fallback. Eigen- and singular vectors are compared up
to the sign or phase torch leaves open (as OpInfo does), and checked to be
unitary and to rebuild the input."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
# float64 runs in the rank-deficient and gradient tests.
DTYPES = [torch.float32, torch.complex64]


def _tol(dtype):
    return 1e-9 if dtype == torch.float64 else 5e-5


def _close(expected, got, dtype, scale=1.0):
    if isinstance(expected, torch.Tensor):
        expected, got = (expected,), (got,)
    for e, g in zip(expected, got):
        g = g.cpu()
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        torch.testing.assert_close(g, e, rtol=_tol(dtype) * scale, atol=_tol(dtype) * scale)


def _inputs(dtype, *shape, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_pjrt.reset_metrics()
    yield
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 5), (0, 3)])
def test_qr_modes_geqrf_and_householder_match_cpu(shape, dtype):
    a = _inputs(dtype, *shape)
    _close(torch.geqrf(a), torch.geqrf(a.to(TPU)), dtype)
    for mode in ("reduced", "complete", "r"):
        _close(torch.linalg.qr(a, mode=mode), torch.linalg.qr(a.to(TPU), mode=mode), dtype)
    packed, tau = torch.geqrf(a)
    if shape[-2] >= shape[-1]:
        _close(torch.linalg.householder_product(packed, tau),
               torch.linalg.householder_product(packed.to(TPU), tau.to(TPU)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ormqr_every_side_and_transpose(dtype):
    packed, tau = torch.geqrf(_inputs(dtype, 5, 3))
    for left in (True, False):
        for transpose in (True, False):
            c = _inputs(dtype, *((5, 2) if left else (2, 5)), seed=1)
            _close(torch.ormqr(packed, tau, c, left=left, transpose=transpose),
                   torch.ormqr(packed.to(TPU), tau.to(TPU), c.to(TPU), left=left,
                               transpose=transpose), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_matches_cpu_up_to_phase(dtype, uplo):
    # Not Hermitian: eigh reads one triangle, as LAPACK does.
    a = _inputs(dtype, 3, 6, 6)
    values, vectors = torch.linalg.eigh(a, UPLO=uplo)
    got_values, got_vectors = torch.linalg.eigh(a.to(TPU), UPLO=uplo)
    _close(values, got_values, dtype)
    _close(vectors.abs(), got_vectors.abs(), dtype, scale=10)
    v = got_vectors.cpu()
    eye = torch.eye(6, dtype=dtype).expand(3, 6, 6)
    _close(eye, v.mH @ v, dtype, scale=10)
    hermitian = (a.tril(-1) + a.tril(-1).mH) if uplo == "L" else (a.triu(1) + a.triu(1).mH)
    hermitian = hermitian + torch.diag_embed(a.diagonal(dim1=-2, dim2=-1).real.to(dtype))
    _close(hermitian, v @ torch.diag_embed(got_values.cpu().to(dtype)) @ v.mH, dtype, scale=10)
    _close(torch.linalg.eigvalsh(a, UPLO=uplo), torch.linalg.eigvalsh(a.to(TPU), UPLO=uplo), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5), (3, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_matches_cpu_up_to_phase_and_is_unitary(shape, full, dtype):
    a = _inputs(dtype, *shape)
    u, s, vh = torch.linalg.svd(a, full_matrices=full)
    gu, gs, gvh = (t.cpu() for t in torch.linalg.svd(a.to(TPU), full_matrices=full))
    k = s.shape[-1]
    _close(s, gs, dtype)
    assert gu.shape == u.shape and gvh.shape == vh.shape
    _close(u[..., :k].abs(), gu[..., :k].abs(), dtype, scale=10)
    _close(vh[..., :k, :].abs(), gvh[..., :k, :].abs(), dtype, scale=10)
    for q in (gu.mH @ gu, gvh @ gvh.mH):
        _close(torch.eye(q.shape[-1], dtype=dtype).expand_as(q), q, dtype, scale=10)
    _close(a, gu[..., :k] @ torch.diag_embed(gs.to(dtype)) @ gvh[..., :k, :], dtype, scale=10)
    _close(torch.linalg.svdvals(a), torch.linalg.svdvals(a.to(TPU)), dtype)


def test_svd_of_a_rank_deficient_matrix_completes_u():
    a = _inputs(torch.float64, 6, 4)
    a[:, 3] = a[:, 0]
    u, s, vh = (t.cpu() for t in torch.linalg.svd(a.to(TPU)))
    _close(torch.linalg.svdvals(a), s, torch.float64)
    _close(torch.eye(6, dtype=torch.float64), u.mH @ u, torch.float64)
    _close(a, u[:, :4] @ torch.diag(s) @ vh, torch.float64)
    _close(torch.linalg.pinv(a), torch.linalg.pinv(a.to(TPU)), torch.float64, scale=1e3)
    assert int(torch.linalg.matrix_rank(a.to(TPU))) == 3


def test_gradients_through_svd_eigh_and_qr_match_cpu():
    a = _inputs(torch.float64, 5, 4)
    sym = _inputs(torch.float64, 4, 4, seed=2)

    def loss(x, y):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        w, v = torch.linalg.eigh(y)
        q, r = torch.linalg.qr(x)
        return (s.sum() + (u.abs() ** 2).sum() * 0 + w.square().sum() + (v @ v.mT).trace()
                + q.sum() + r.triu().sum())

    grads = []
    for device in ("cpu", TPU):
        x = a.to(device).requires_grad_()
        y = sym.to(device).requires_grad_()
        grads.append([g.cpu() for g in torch.autograd.grad(loss(x, y), (x, y))])
    for e, g in zip(*grads):
        torch.testing.assert_close(g, e, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse_match_cpu(dtype, upper):
    x = _inputs(dtype, 2, 4, 4)
    spd = x @ x.mH + 4 * torch.eye(4, dtype=dtype)
    factor = torch.linalg.cholesky(spd, upper=upper)
    rhs = _inputs(dtype, 2, 4, 3, seed=1)
    _close(torch.cholesky_solve(rhs, factor, upper=upper),
           torch.cholesky_solve(rhs.to(TPU), factor.to(TPU), upper=upper), dtype)
    _close(torch.cholesky_inverse(factor[0], upper=upper),
           torch.cholesky_inverse(factor[0].to(TPU), upper=upper), dtype)


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
@pytest.mark.parametrize("upper,transpose,unit", [(True, False, False), (False, True, True)])
def test_triangular_solve_broadcasts_like_cpu(upper, transpose, unit):
    a = _inputs(torch.float32, 4, 4) + 4 * torch.eye(4)
    b = _inputs(torch.float32, 2, 4, 3, seed=1)
    _close(torch.triangular_solve(b, a, upper=upper, transpose=transpose, unitriangular=unit),
           torch.triangular_solve(b.to(TPU), a.to(TPU), upper=upper, transpose=transpose,
                                  unitriangular=unit), torch.float32)


@pytest.mark.parametrize("call,error", [
    (lambda a: torch.geqrf(a[0]), RuntimeError),
    (lambda a: torch.linalg.qr(a, mode="full"), RuntimeError),
    (lambda a: torch.linalg.eigh(a[:, :2]), RuntimeError),
    (lambda a: torch.linalg.eigh(a.to(torch.bfloat16)), NotImplementedError),
    (lambda a: torch.linalg.svd(a.to(torch.int64)), RuntimeError),
    (lambda a: torch.linalg.householder_product(a[:2], a[0]), RuntimeError),
    (lambda a: torch.cholesky_inverse(a[:, :2]), RuntimeError),
])
def test_bad_input_raises_like_cpu(call, error):
    a = _inputs(torch.float32, 3, 3)
    with pytest.raises(error) as cpu:
        call(a)
    with pytest.raises(error) as tpu:
        call(a.to(TPU))
    assert type(tpu.value) is type(cpu.value)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_every_driver_reports_what_the_cpu_does(driver):
    a, b = _inputs(torch.float32, 2, 5, 3), _inputs(torch.float32, 2, 5, 2, seed=1)
    for rhs in (b, b[..., 0]):
        _close(torch.linalg.lstsq(a, rhs, driver=driver),
               torch.linalg.lstsq(a.to(TPU), rhs.to(TPU), driver=driver), torch.float32, scale=4)
    if driver != "gels":
        wide = a.mT.contiguous()
        _close(torch.linalg.lstsq(wide, b[..., :3, :], driver=driver),
               torch.linalg.lstsq(wide.to(TPU), b[..., :3, :].to(TPU), driver=driver), torch.float32,
               scale=4)


def test_lstsq_defaults_to_gels_off_the_cpu_and_rejects_bad_drivers():
    a, b = _inputs(torch.float64, 6, 3), _inputs(torch.float64, 6, 2, seed=1)
    got = torch.linalg.lstsq(a.to(TPU), b.to(TPU))
    want = torch.linalg.lstsq(a, b, driver="gels")
    _close(want, got, torch.float64, scale=10)
    with pytest.raises(RuntimeError, match="driver"):
        torch.linalg.lstsq(a.to(TPU), b.to(TPU), driver="gelsx")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16], ids=str)
def test_matrix_exp_matches_a_float64_reference(dtype):
    # Scaled so that several squarings run; the reference is the CPU's in
    # float64 (its bfloat16 kernel returns NaN for these inputs).
    a = _inputs(torch.float64, 3, 5, 5) * torch.tensor([0.1, 3.0, 9.0], dtype=torch.float64)[:, None, None]
    a = a.to(dtype)
    want = torch.linalg.matrix_exp(a.to(torch.complex128 if dtype.is_complex else torch.float64))
    got = torch.linalg.matrix_exp(a.to(TPU)).cpu()
    assert got.dtype == dtype
    tol = {torch.float64: 1e-12, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
    torch.testing.assert_close(got.to(want.dtype), want, rtol=tol, atol=tol * float(want.abs().max()))
    assert torch.linalg.matrix_exp(torch.zeros(2, 0, 0).to(TPU)).shape == (2, 0, 0)


def test_matrix_exp_gradient_matches_cpu():
    x = _inputs(torch.float64, 3, 3)
    grads = []
    for device in ("cpu", TPU):
        leaf = x.to(device).requires_grad_()
        grads.append(torch.autograd.grad(torch.linalg.matrix_exp(leaf).square().sum(), leaf)[0].cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-10, atol=1e-10)
