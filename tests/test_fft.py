"""torch.fft on tpu: the three primitives (_fft_r2c, _fft_c2r, _fft_c2c)
lowered to stablehlo.fft, through the public functions, against the CPU,
with no CPU fallback: any dims in any order, more than 3 dims, every norm,
n= resizing, Hermitian transforms, stft, float64, and a gradient."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

DEV = torch_pjrt.settings().device_name
fft = torch.fft

CASES = {
    "fft": (lambda t: fft.fft(t), "c"),
    "ifft_dim1": (lambda t: fft.ifft(t, dim=1), "c"),
    "fft_of_real": (lambda t: fft.fft(t, dim=0), "r"),
    "fft2_ortho": (lambda t: fft.fft2(t, norm="ortho"), "c"),
    "fftn": (lambda t: fft.fftn(t), "c"),
    "fftn_out_of_order": (lambda t: fft.fftn(t, dim=(2, 0)), "c"),
    "rfft": (lambda t: fft.rfft(t), "r"),
    "rfft_n_forward": (lambda t: fft.rfft(t, n=7, dim=1, norm="forward"), "r"),
    "rfft2": (lambda t: fft.rfft2(t), "r"),
    "rfftn_out_of_order": (lambda t: fft.rfftn(t, dim=(0, 2, 1)), "r"),
    "irfft": (lambda t: fft.irfft(t), "c"),
    "irfft_n_ortho": (lambda t: fft.irfft(t, n=9, dim=1, norm="ortho"), "c"),
    "irfftn": (lambda t: fft.irfftn(t, dim=(2, 0, 1)), "c"),
    "hfft": (lambda t: fft.hfft(t), "c"),
    "ihfft": (lambda t: fft.ihfft(t), "r"),
    "ihfft2": (lambda t: fft.ihfft2(t), "r"),  # conjugates through _conj_physical
    "fftn_4d": (lambda t: fft.fftn(t.reshape(2, 2, 6, 10)), "c"),
    "rfftn_4d": (lambda t: fft.rfftn(t.reshape(2, 2, 6, 10)), "r"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_cpu(name):
    fn, kind = CASES[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 10, generator=g, dtype=torch.complex64 if kind == "c" else torch.float32)
    expected = fn(x)
    torch_pjrt.reset_metrics()
    got = fn(x.to(DEV))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_stft_and_float64():
    g = torch.Generator().manual_seed(1)
    signal = torch.randn(2, 100, generator=g)
    expected = torch.stft(signal, 16, window=torch.hann_window(16), return_complex=True)
    got = torch.stft(signal.to(DEV), 16, window=torch.hann_window(16, device=DEV), return_complex=True)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
    x = torch.randn(5, 8, generator=g, dtype=torch.float64)
    torch.testing.assert_close(fft.rfft(x.to(DEV)).cpu(), fft.rfft(x), rtol=1e-10, atol=1e-10)


def test_gradient_matches_cpu():
    def grad(x):
        x = x.clone().requires_grad_(True)
        fft.irfft(fft.rfft(x) * 2, n=10).pow(2).sum().backward()
        return x.grad

    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(grad(x.to(DEV)).cpu(), grad(x), rtol=1e-4, atol=1e-4)


def test_bad_dims_raise_like_cpu():
    x = torch.randn(4, 6, dtype=torch.complex64)
    with pytest.raises(RuntimeError):
        fft.fftn(x, dim=(0, 0))
    with pytest.raises(RuntimeError):
        fft.fftn(x.to(DEV), dim=(0, 0))


def test_conj_physical_matches_cpu_with_gradient():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 4, generator=g, dtype=torch.complex64)
    torch_pjrt.reset_metrics()
    assert torch.equal(torch.conj_physical(z.to(DEV)).cpu(), torch.conj_physical(z))
    assert torch.equal(z.to(DEV).conj().resolve_conj().cpu(), z.conj().resolve_conj())
    r = torch.randn(5, generator=g)
    assert torch.equal(torch.conj_physical(r.to(DEV)).cpu(), r)
    assert torch_pjrt.metrics()["fallback_ops"] == {}

    def grad(x):
        x = x.clone().requires_grad_(True)
        torch.view_as_real(torch.conj_physical(x) * 2).pow(2).sum().backward()
        return x.grad

    torch.testing.assert_close(grad(z.to(DEV)).cpu(), grad(z), rtol=1e-5, atol=1e-5)
