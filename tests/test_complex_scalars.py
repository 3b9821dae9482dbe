"""Complex Python numbers as op arguments on tpu (csrc/eager/op_kernel.cc):
they travel as complex64 or complex128 scalars and promote as torch
promotes them, in strict and fused eager, with autograd (polar's backward
multiplies by 1j)."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


@pytest.mark.parametrize("fn,dtype", [
    (lambda a: a * 1j, torch.float32),
    (lambda a: a * (2 - 1j), torch.complex64),
    (lambda a: a + 1j, torch.complex64),
    (lambda a: a * 1j, torch.float64),
    (lambda a: a.clone().mul_(1j), torch.complex64),
    (lambda a: a ** (0.5 + 1j), torch.complex64),
    (lambda a: torch.where(a.real > 0, a, 1j), torch.complex64),
    (lambda a: a * torch.tensor(1 + 2j), torch.complex64),
])
def test_complex_numbers_promote_like_cpu(fn, dtype):
    x = torch.randn(6, dtype=dtype, generator=torch.Generator().manual_seed(0))
    torch_pjrt.reset_metrics()
    want, got = fn(x), fn(x.to(TPU)).cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_a_real_tensor_cannot_take_a_complex_result_in_place():
    for device in ("cpu", TPU):
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.randn(3).to(device).mul_(1j)


def test_polar_backward():
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(4, generator=g) + 0.5, torch.randn(4, generator=g)
    grads = []
    for device in ("cpu", TPU):
        x, y = a.to(device).requires_grad_(), b.to(device).requires_grad_()
        z = torch.polar(x, y)
        grads.append([t.cpu() for t in torch.autograd.grad((z * (1 - 2j)).real.sum() + z.abs().sum(), (x, y))])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
