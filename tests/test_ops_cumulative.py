"""cummax, cummin and logcumsumexp on tpu (csrc/ops/cumulative.cc) against
CPU PyTorch: values and indices exactly (ties and NaN go to the later
element, as in torch), log-sum-exp within float tolerance, gradients, and no
CPU fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


def _data():
    x = torch.randint(0, 4, (3, 9), generator=torch.Generator().manual_seed(0)).float()
    x[0, 3] = x[1, 5] = x[1, 7] = float("nan")
    return x


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
@pytest.mark.parametrize("kind", ["float", "int", "bool"])
def test_running_extrema_match_cpu_exactly(fn, dim, kind):
    x = _data()
    x = {"float": x, "int": x.nan_to_num(9).long(), "bool": x.nan_to_num(0).bool()}[kind]
    torch_pjrt.reset_metrics()
    values, indices = fn(x.to(TPU), dim)
    expected = fn(x, dim)
    torch.testing.assert_close(values.cpu(), expected.values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(indices.cpu(), expected.indices)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_logcumsumexp_matches_cpu_with_infinities():
    for x in (torch.randn(3, 9, generator=torch.Generator().manual_seed(1)) * 30,
              torch.tensor([-float("inf"), -float("inf"), 1.0, float("inf"), 2.0])):
        for dim in range(x.dim()):
            torch.testing.assert_close(torch.logcumsumexp(x.to(TPU), dim).cpu(),
                                       torch.logcumsumexp(x, dim), rtol=1e-5, atol=1e-5)


def test_gradients_and_zero_dim():
    x = torch.randn(4, 5)
    xc = x.clone().requires_grad_()
    (torch.cummax(xc, 1).values.sum() + torch.logcumsumexp(xc, 0).sum()).backward()
    xt = x.to(TPU).requires_grad_()
    (torch.cummax(xt, 1).values.sum() + torch.logcumsumexp(xt, 0).sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    s = torch.tensor(3.0)
    v, i = torch.cummin(s.to(TPU), 0)
    assert (v.item(), i.item()) == (3.0, 0)
