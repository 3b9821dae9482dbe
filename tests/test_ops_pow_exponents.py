"""pow with a Python-number exponent: the exponents torch's CPU kernel
computes without pow (0, 1, 2, 3, +-0.5, -1, -2) are built into the program
in torch's own form (x * x, sqrt, ...), other exponents stay runtime
parameters, and integer tensors to negative integer powers raise as on CPU.
Each case is compared with CPU PyTorch, special values included."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = torch_pjrt.settings().device_name
INF, NAN = float("inf"), float("nan")
EXPONENTS = [0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.0, 1.7, -3, -2.5]
SPECIAL_VALUES = [0.0, -0.0, 1.5, -2.0, 3.0, NAN, INF, -INF, 1e-3, -1e-3]


def _base(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    if not dtype.is_floating_point:
        return torch.tensor([-3, -1, 0, 1, 2, 5], dtype=dtype)
    return torch.tensor(SPECIAL_VALUES, dtype=dtype)


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_pjrt.reset_metrics()
    yield
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("exponent", EXPONENTS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                   torch.int64, torch.int32, torch.bool], ids=str)
def test_pow_matches_cpu(dtype, exponent):
    x = _base(dtype)
    try:
        expected = x ** exponent
    except RuntimeError as err:  # integers to negative integer powers
        with pytest.raises(RuntimeError, match="negative integer powers"):
            (x.to(TPU) ** exponent).cpu()
        assert "negative integer powers" in str(err)
        return
    got = (x.to(TPU) ** exponent).cpu()
    assert got.dtype == expected.dtype
    # bfloat16 and float16: torch and XLA may round the last bit differently.
    tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(dtype, 1e-6)
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("exponent", [2, 0.5, -1, 1.7])
def test_in_place_and_out_forms(exponent):
    x = torch.tensor([0.25, 1.5, 4.0, -0.0])
    expected = x ** exponent
    y = x.to(TPU)
    y.pow_(exponent)
    torch.testing.assert_close(y.cpu(), expected, equal_nan=True)
    out = torch.empty(4, device=TPU)
    torch.pow(x.to(TPU), exponent, out=out)
    torch.testing.assert_close(out.cpu(), expected, equal_nan=True)


def _compiles(fn) -> int:
    torch_pjrt.reset_metrics()
    fn()
    m = torch_pjrt.metrics()
    return m["compilations"] + m["cache_hits_disk"]


@pytest.mark.strict_only  # counts single-op programs
def test_other_exponents_share_one_program():
    x = torch.rand(5, 7).to(TPU) + 0.5
    (x ** 1.25).cpu()  # warm: the runtime-exponent program of this shape
    results = []
    assert _compiles(lambda: results.extend((x ** (1.3 + 0.07 * i)).cpu() for i in range(8))) == 0
    for i, r in enumerate(results):
        torch.testing.assert_close(r, x.cpu() ** (1.3 + 0.07 * i))


@pytest.mark.strict_only
def test_a_special_exponent_is_its_own_program():
    x = torch.rand(6, 3).to(TPU)
    (x ** 1.25).cpu()
    assert _compiles(lambda: (x ** 2).cpu()) == 1
    assert _compiles(lambda: (x ** 3).cpu()) == 1
    assert _compiles(lambda: (x ** 2).cpu()) == 0  # cached


def test_gradient_through_square_and_sqrt():
    for exponent in (2, 0.5, -1, 1.7):
        x_cpu = torch.tensor([0.5, 1.5, 3.0], requires_grad=True)
        x_dev = x_cpu.detach().to(TPU).requires_grad_()
        (x_cpu ** exponent).sum().backward()
        (x_dev ** exponent).sum().backward()
        torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
