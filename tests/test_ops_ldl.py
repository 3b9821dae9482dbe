"""linalg.ldl_factor(_ex) and linalg.ldl_solve lowered natively (csrc/ops/ldl.cc).

Compared with CPU PyTorch (LAPACK ?sytrf/?hetrf and ?sytrs/?hetrs): pivots
and info exactly, LD and solutions within float tolerances. The matrices are
symmetric indefinite ones with diagonals scaled from tiny to large so that
every pivot kind occurs (1x1 without interchange, 1x1 with interchange, 2x2),
plus singular ones for info. Few shapes: each compiles a program.
"""

import pytest
import torch

import torch_pjrt

DEV = "tpu"

TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.complex64: dict(rtol=1e-4, atol=1e-4),
}


def symmetric(batch, n, dtype, hermitian, seed):
    g = torch.Generator().manual_seed(seed)
    real = torch.float32 if dtype == torch.complex64 else dtype
    a = torch.randn(batch, n, n, generator=g, dtype=dtype)
    scale = torch.logspace(-3, 1, batch, dtype=torch.float64).to(real).view(-1, 1)
    idx = torch.arange(n)
    a[:, idx, idx] = a[:, idx, idx] * scale
    a = a + (a.mH if hermitian else a.mT)
    a[0] = 0  # info = 1
    a[1, :, :2] = 0  # info = 2: a lone 1x1 pivot, then a zero column
    a[1, :2, :] = 0
    a[1, 0, 0] = 1
    ints = torch.randint(-2, 3, (n, n), generator=g).to(dtype)
    a[2] = ints + (ints.mH if hermitian else ints.mT)  # ties between equal magnitudes
    return a


def pivot_kinds(piv):
    n = piv.shape[-1]
    own = torch.arange(1, n + 1, dtype=piv.dtype)
    return (piv < 0).sum().item(), ((piv > 0) & (piv != own)).sum().item(), (piv == own).sum().item()


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_pjrt.reset_metrics()
    yield
    assert torch_pjrt.metrics()["fallback_ops"] == {}


CASES = [
    (torch.float64, False, 6),
    (torch.float32, False, 5),
    (torch.complex64, False, 5),
    (torch.complex64, True, 5),
]


@pytest.mark.parametrize("dtype,hermitian,n", CASES)
def test_factor_and_solve_match_cpu(dtype, hermitian, n):
    batch = 48
    a = symmetric(batch, n, dtype, hermitian, seed=n + 7 * hermitian)
    ld, piv, info = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    ld_t, piv_t, info_t = (x.cpu() for x in torch.linalg.ldl_factor_ex(a.to(DEV), hermitian=hermitian))
    neg, swapped, kept = pivot_kinds(piv)
    assert neg > 0 and swapped > 0 and kept > 0, (neg, swapped, kept)
    assert piv_t.dtype == torch.int32 and info_t.dtype == torch.int32
    torch.testing.assert_close(piv_t, piv, rtol=0, atol=0)
    torch.testing.assert_close(info_t, info, rtol=0, atol=0)
    assert info[0] == 1 and info[1] == 2
    torch.testing.assert_close(ld_t, ld, **TOL[dtype])

    ok = info == 0
    rhs = torch.randn(batch, n, 3, dtype=dtype, generator=torch.Generator().manual_seed(1))
    x = torch.linalg.ldl_solve(ld, piv, rhs, hermitian=hermitian)
    # From the CPU's factor and from ours.
    x_cpu_factor = torch.linalg.ldl_solve(ld.to(DEV), piv.to(DEV), rhs.to(DEV), hermitian=hermitian).cpu()
    x_own = torch.linalg.ldl_solve(ld_t.to(DEV), piv_t.to(DEV), rhs.to(DEV), hermitian=hermitian).cpu()
    torch.testing.assert_close(x_cpu_factor[ok], x[ok], **TOL[dtype])
    torch.testing.assert_close(x_own[ok], x[ok], **TOL[dtype])


def test_ldl_factor_and_broadcast_solve():
    # The shape of the first case (its program is reused), all nonsingular.
    a = symmetric(48, 6, torch.float64, False, seed=3)
    a[:3] = a[3:6]
    ld, piv = torch.linalg.ldl_factor(a)
    ld_t, piv_t = (x.cpu() for x in torch.linalg.ldl_factor(a.to(DEV)))
    torch.testing.assert_close(piv_t, piv, rtol=0, atol=0)
    torch.testing.assert_close(ld_t, ld, **TOL[torch.float64])
    # B's batch (3, 1) broadcasts against LD's (48,); int64 pivots are accepted.
    # (The CPU reference gets expanded copies: CPU ldl_solve crashes when the
    # batches of LD and B differ, in torch 2.13.)
    rhs = torch.randn(3, 1, 6, 2, dtype=torch.float64)
    x = torch.linalg.ldl_solve(ld.expand(3, 48, 6, 6).contiguous(), piv.expand(3, 48, 6).contiguous(),
                               rhs.expand(3, 48, 6, 2).contiguous())
    x_t = torch.linalg.ldl_solve(ld.to(DEV), piv.long().to(DEV), rhs.to(DEV)).cpu()
    torch.testing.assert_close(x_t, x, **TOL[torch.float64])


def test_empty():
    a = torch.randn(2, 0, 0)
    ld, piv, info = (x.cpu() for x in torch.linalg.ldl_factor_ex(a.to(DEV)))
    assert ld.shape == (2, 0, 0) and piv.shape == (2, 0) and info.tolist() == [0, 0]


def _raises_like(fn, *args, **kwargs):
    with pytest.raises(Exception) as cpu:
        fn(*args, **kwargs)
    with pytest.raises(type(cpu.value)) as dev:
        out = fn(*(x.to(DEV) if isinstance(x, torch.Tensor) else x for x in args), **kwargs)
        (out[0] if isinstance(out, tuple) else out).cpu()
    assert str(cpu.value) in str(dev.value) or "INTERNAL ASSERT" in str(cpu.value), (cpu.value, dev.value)


def test_bad_input_raises_like_cpu():
    a = torch.randn(3, 3)
    piv = torch.ones(3, dtype=torch.int32)
    b = torch.randn(3, 1)
    _raises_like(torch.linalg.ldl_factor_ex, torch.randn(3, 4))
    _raises_like(torch.linalg.ldl_factor_ex, torch.randn(3))
    _raises_like(torch.linalg.ldl_factor_ex, torch.ones(3, 3, dtype=torch.int32))
    _raises_like(torch.linalg.ldl_factor, torch.zeros(3, 3))
    _raises_like(torch.linalg.ldl_solve, torch.randn(3, 4), piv, b)
    _raises_like(torch.linalg.ldl_solve, torch.randn(3), piv, b)
    _raises_like(torch.linalg.ldl_solve, a, piv, b.double())
    _raises_like(torch.linalg.ldl_solve, a, torch.ones(3), b)
    _raises_like(torch.linalg.ldl_solve, a, torch.ones(2, dtype=torch.int32), b)
    _raises_like(torch.linalg.ldl_solve, a, piv, torch.randn(4, 1))
    _raises_like(torch.linalg.ldl_solve, a, piv, torch.randn(3))
    _raises_like(torch.linalg.ldl_solve, a, piv * 5, b)
    _raises_like(torch.linalg.ldl_solve, a, piv * 0, b)
