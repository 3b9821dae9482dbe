"""torch.special's Bessel functions J0, J1, Y0, Y1, K0, K1 (and scaled),
spherical j0 and Airy Ai on tpu (csrc/ops/bessel.cc, csrc/ops/airy.cc)
against CPU PyTorch, on both sides of each series/integral switch point, at
edge values (signed zeros, negative x, infinities, NaN, large x) and for
integer and bool inputs, with no fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
INF, NAN = float("inf"), float("nan")

NAMES = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
         "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
         "spherical_bessel_j0", "airy_ai"]

# Both sides of the switches (1.5, 2, 2.5, 3), the OpInfo range (-9..9),
# edges and large arguments.
POINTS = [0.0, -0.0, 1e-30, -1e-30, 1e-5, 0.3, -0.7, 1.0, 1.4999, 1.5001, 1.9999, 2.0, 2.0001,
          -2.4999, -2.5001, 2.9999, 3.0, 3.0001, -3.7, 4.2, 5.0, -6.3, 7.7, 8.9, -8.9, 12.5,
          25.0, -25.0, 50.0, -50.0, 99.0, INF, -INF, NAN]


def _both(fn, x):
    torch_pjrt.reset_metrics()
    expected = fn(x)
    got = fn(x.to(TPU)).cpu()
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    assert got.dtype == expected.dtype
    return got, expected


def _close(got, expected, rtol, atol):
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)


# One program per op and dtype: edge values, both sides of every switch and
# large arguments in one tensor, compared by part.
EXACT = [0.0, -0.0, INF, -INF, NAN, -1.0, -5.0, -1e-300]  # exact on CPU (NaN below 0 for Y, K)
LARGE = [500.0, 1234.5, 1e4, 3e5, -120.0, -500.0]


@pytest.mark.parametrize("name", NAMES)
def test_float64(name):
    fn = getattr(torch.special, name)
    x = torch.tensor(EXACT + POINTS + LARGE, dtype=torch.float64)
    got, expected = _both(fn, x)
    n = len(EXACT)
    exact = [0, 1, 2, 3, 4] + ([5, 6, 7] if name.startswith(("bessel_y", "modified", "scaled")) else [])
    _close(got[exact], expected[exact], rtol=0, atol=0)
    # CPU's float64 J and Y are rational fits good to ~1e-7 absolute; the
    # lowering to ~1e-15 (csrc/ops/bessel.cc), so this bounds CPU's error.
    _close(got[n:], expected[n:], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_float32_sweep(name):
    fn = getattr(torch.special, name)
    x = torch.cat([torch.tensor(POINTS), torch.linspace(-12, 40, 2001)])
    got, expected = _both(fn, x)
    keep = x.abs() < 30 if name == "airy_ai" else slice(None)  # CPU's float32 Ai drifts past -30
    _close(got[keep], expected[keep], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_int64_computes_in_default_float(name):
    got, expected = _both(getattr(torch.special, name), torch.tensor([0, 1, 3, 7, -2, 20]))
    _close(got, expected, rtol=2e-5, atol=1e-6)


def test_bool_and_uint8_out_and_errors():
    for x in (torch.tensor([True, False]), torch.tensor([0, 3, 255], dtype=torch.uint8)):
        _close(*_both(torch.special.bessel_j0, x), rtol=2e-5, atol=1e-6)
    x = torch.tensor([0.5, 4.0, 9.0])
    out = torch.empty(3, device=TPU)
    torch.special.bessel_j0(x.to(TPU), out=out)
    _close(out.cpu(), torch.special.bessel_j0(x), rtol=2e-5, atol=1e-6)
    for dtype in (torch.complex64, torch.bfloat16, torch.float16):
        with pytest.raises(NotImplementedError, match="bessel_y0_cpu"):
            torch.special.bessel_y0(torch.ones(2, dtype=dtype, device=TPU))
    with pytest.raises(NotImplementedError, match="airy_ai_cpu"):
        torch.special.airy_ai(torch.ones(2, dtype=torch.complex64, device=TPU))
