"""3-d and adaptive pooling on tpu (csrc/ops/pooling.cc, adaptive_pooling.cc)
against CPU PyTorch: max_pool3d (indices included), avg_pool3d, adaptive
average and max pooling with windows that do not divide the input evenly,
their gradients, empty batches, NaN and tied maxima, bfloat16, and the CPU's
errors. Every tpu call must run natively (no CPU fallback)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"
FWD = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
GRAD = dict(rtol=1e-4, atol=1e-4)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _check(fn, x, dtype=torch.float32, grad=True):
    """fn's outputs on tpu equal CPU's (indices exactly), and with `grad`
    the input gradient of the first output too; nothing falls back."""
    x = x.to(dtype)
    xc = x.clone().requires_grad_(grad)
    xt = x.to(TPU).requires_grad_(grad)
    torch_pjrt.reset_metrics()
    expected, got = fn(xc), fn(xt)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got, strict=True):
        assert g.device.type == TPU and g.dtype == e.dtype and g.shape == e.shape
        if e.dtype == torch.int64:
            assert torch.equal(g.cpu(), e)
        else:
            torch.testing.assert_close(g.detach().cpu(), e.detach(), equal_nan=True, **FWD[dtype])
    if grad and expected[0].numel():
        go = _randn(*expected[0].shape, seed=1).to(dtype)
        (ge,) = torch.autograd.grad(expected[0], xc, go)
        (gt,) = torch.autograd.grad(got[0], xt, go.to(TPU))
        torch.testing.assert_close(gt.cpu(), ge, **GRAD)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


X5 = _randn(2, 3, 7, 9, 10)

CASES = {
    "max3d_ceil_pad": lambda t: F.max_pool3d(t, (2, 3, 3), (1, 2, 2), (1, 1, 0), ceil_mode=True,
                                             return_indices=True),
    "max3d_dilation_unbatched": lambda t: F.max_pool3d(t[0], 2, dilation=(2, 1, 2), return_indices=True),
    "avg3d_ceil_no_pad_count": lambda t: F.avg_pool3d(t, (2, 3, 3), (1, 2, 2), (1, 1, 0), ceil_mode=True,
                                                      count_include_pad=False),
    "avg3d_pad_count_ceil": lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, count_include_pad=True),
    "avg3d_divisor_unbatched": lambda t: F.avg_pool3d(t[1], (3, 2, 4), (2, 2, 3), (1, 1, 2),
                                                      divisor_override=5),
    "adaptive_avg3d_uneven": lambda t: F.adaptive_avg_pool3d(t, (3, 4, 6)),
    "adaptive_avg3d_upsample_unbatched": lambda t: F.adaptive_avg_pool3d(t[0], (8, 2, 13)),
    "adaptive_max3d_uneven": lambda t: F.adaptive_max_pool3d(t, (3, 4, 6), return_indices=True),
    "adaptive_max3d_none_global": lambda t: F.adaptive_max_pool3d(t, (None, 1, 3), return_indices=True),
    "adaptive_max2d_uneven": lambda t: F.adaptive_max_pool2d(t[:, :, 0], (4, 6), return_indices=True),
    "adaptive_max2d_larger_unbatched": lambda t: F.adaptive_max_pool2d(t[0, :, 1], (11, 13),
                                                                       return_indices=True),
    "adaptive_max1d_uneven": lambda t: F.adaptive_max_pool1d(t[:, :, 0, 0], 4, return_indices=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pooling_matches_cpu_with_gradient(case):
    _check(CASES[case], X5)


@pytest.mark.parametrize("fn", [
    lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True),
    lambda t: F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True),
    lambda t: F.adaptive_max_pool2d(t[:, :, 0], (3, 4), return_indices=True),
], ids=["max3d", "adaptive_max3d", "adaptive_max2d"])
def test_tied_and_nan_maxima_pick_cpu_indices(fn):
    # Ties keep the first index; among NaNs the CPU keeps the last.
    x = torch.randint(0, 3, (2, 2, 5, 6, 7), generator=torch.Generator().manual_seed(2)).float()
    x[0, 0, 1, 2, 1] = x[0, 0, 1, 2, 3] = x[1, 1, 0, 0, 0] = float("nan")
    _check(fn, x, grad=False)


@pytest.mark.parametrize("fn", [
    lambda t: F.adaptive_avg_pool3d(t, (3, 4, 6)),
    lambda t: F.adaptive_avg_pool3d(t, (1, 2, 1)),  # long windows: summed in a loop
    lambda t: F.adaptive_max_pool3d(t, (3, 4, 6), return_indices=True),
    lambda t: F.max_pool3d(t, 2, return_indices=True),
], ids=["adaptive_avg", "adaptive_avg_long", "adaptive_max", "max"])
def test_bfloat16_matches_cpu(fn):
    # The CPU sums 3-d adaptive windows in bfloat16, element by element.
    _check(fn, X5 * 3, dtype=torch.bfloat16, grad=False)


@pytest.mark.parametrize("fn,shape", [
    (lambda t: F.avg_pool1d(t, 6, 3, 2), (0, 3, 9)),
    (lambda t: F.avg_pool3d(t, 2, ceil_mode=True), (0, 3, 4, 5, 5)),
    (lambda t: F.max_pool3d(t, 2, return_indices=True), (0, 3, 4, 5, 5)),
    (lambda t: F.adaptive_avg_pool3d(t, (2, 3, 1)), (0, 3, 4, 5, 5)),
    (lambda t: F.adaptive_max_pool2d(t, 3, return_indices=True), (0, 3, 9, 4)),
    (lambda t: F.adaptive_max_pool2d(t, 0, return_indices=True), (2, 3, 9, 4)),
], ids=["avg1d", "avg3d", "max3d", "adaptive_avg3d", "adaptive_max2d", "zero_output"])
def test_empty_results(fn, shape):
    _check(fn, torch.zeros(shape), grad=False)


@pytest.mark.parametrize("call", [
    lambda x: F.avg_pool3d(x, 3, padding=2),
    lambda x: F.avg_pool3d(x, 2, divisor_override=0),
    lambda x: F.max_pool3d(x[:, :, :2], 3),
    lambda x: F.max_pool3d(x[:, :, :0], 2),
    lambda x: F.adaptive_max_pool3d(x[:, :0], 2),
    lambda x: torch.ops.aten.adaptive_max_pool2d(x[:, :, 0], [3, 3, 3]),
], ids=["pad_too_large", "zero_divisor", "input_too_small", "empty_depth", "empty_channels",
        "output_size_length"])
def test_errors_like_cpu(call):
    x = _randn(1, 2, 4, 4, 4)
    with pytest.raises(RuntimeError):
        call(x)
    with pytest.raises(RuntimeError):
        call(x.to(TPU)).cpu()
