"""cdist and pdist on tpu (csrc/ops/distances.cc) against CPU PyTorch for
each form of p, forward and backward, with batch broadcasting and the CPU's
errors."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, float("inf")])
def test_cdist_and_pdist_match_cpu(p):
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, 3, 4, generator=g), torch.randn(1, 5, 4, generator=g)
    torch_pjrt.reset_metrics()
    torch.testing.assert_close(torch.cdist(x1.to(TPU), x2.to(TPU), p).cpu(), torch.cdist(x1, x2, p),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.pdist(x1[0].to(TPU), p).cpu(), torch.pdist(x1[0], p),
                               rtol=1e-5, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_large_sets_and_gradient():
    g = torch.Generator().manual_seed(1)
    a, c = torch.randn(30, 4, generator=g), torch.randn(40, 4, generator=g)
    # CPU takes a matmul route for these sizes; the values agree within float error.
    torch.testing.assert_close(torch.cdist(a.to(TPU), c.to(TPU)).cpu(), torch.cdist(a, c),
                               rtol=1e-5, atol=1e-5)
    x = a.clone().requires_grad_()
    torch.cdist(x, c).sum().backward()
    xt = a.to(TPU).requires_grad_()
    torch.cdist(xt, c.to(TPU)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_gradients_of_cdist_and_pdist_match_cpu(p):
    g = torch.Generator().manual_seed(2)
    x1, x2 = torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g,
                                                                              dtype=torch.float64)
    x2[0] = x1[0, 0]  # a zero distance, and zero differences
    torch_pjrt.reset_metrics()
    grads = []
    for device in ("cpu", TPU):
        a, c = x1.clone().to(device).requires_grad_(), x2.clone().to(device).requires_grad_()
        rows = x1[0].clone().to(device).requires_grad_()
        loss = (torch.cdist(a, c, p) ** 2).sum() + (torch.pdist(rows, p) ** 2).sum()
        grads.append([t.cpu() for t in torch.autograd.grad(loss, (a, c, rows))])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("call", [
    lambda d: torch.cdist(torch.randn(3, 4, device=d), torch.randn(5, 4, device=d), -1.0),
    lambda d: torch.cdist(torch.randn(3, 4, device=d), torch.randn(5, 3, device=d)),
    lambda d: torch.pdist(torch.randn(2, 3, 4, device=d)),
    lambda d: torch.cdist(torch.ones(3, 4, dtype=torch.long, device=d),
                          torch.ones(3, 4, dtype=torch.long, device=d)),
])
def test_errors_like_cpu(call):
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as tpu:
        call(TPU)
    assert type(tpu.value) is type(cpu.value)
