"""interpolate's separable modes on tpu (csrc/ops/upsample.cc): nearest and
nearest-exact in 1-3 D, linear, bilinear, trilinear, bicubic and
antialiased bilinear, forward and backward, sizes and scale factors, against CPU PyTorch with no fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"

CASES = [
    ("nearest-exact", (1, 2, 5), dict(size=8)),
    ("nearest-exact", (1, 2, 5, 4), dict(scale_factor=(1.7, 0.6))),
    ("nearest-exact", (2, 1, 3, 4, 2), dict(size=(5, 2, 3))),
    ("linear", (2, 3, 6), dict(size=11, align_corners=True)),
    ("linear", (2, 3, 6), dict(scale_factor=0.45, align_corners=False)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 3, 8), align_corners=False)),
    ("trilinear", (1, 1, 2, 3, 2), dict(scale_factor=2.5, align_corners=True)),
    ("bicubic", (2, 2, 4, 5), dict(size=(7, 3), align_corners=False)),
    ("bicubic", (1, 3, 3, 3), dict(scale_factor=2.2, align_corners=True)),
    ("bilinear", (2, 2, 10, 7), dict(size=(4, 9), antialias=True, align_corners=False)),
    ("bilinear", (1, 2, 9, 5), dict(size=(2, 3), antialias=True, align_corners=True)),
]


@pytest.mark.parametrize("mode,shape,kwargs", CASES)
def test_interpolate_forward_and_backward_match_cpu(mode, shape, kwargs):
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(*shape, generator=g, requires_grad=True)
    xt = x.detach().to(TPU).requires_grad_()
    torch_pjrt.reset_metrics()
    y = F.interpolate(x, mode=mode, **kwargs)
    yt = F.interpolate(xt, mode=mode, **kwargs)
    torch.testing.assert_close(yt.detach().cpu(), y.detach(), rtol=1e-5, atol=1e-5)
    w = torch.randn(y.shape, generator=g)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    (grad_t,) = torch.autograd.grad((yt * w.to(TPU)).sum(), xt)
    torch.testing.assert_close(grad_t.cpu(), grad, rtol=1e-4, atol=1e-4)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
