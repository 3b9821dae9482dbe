"""The ops mixture-of-experts routing needs, lowered natively: histc (integer
inputs included, which CPU PyTorch refuses), bincount, floor_divide and
_grouped_mm in its four layouts, forward and backward. Each sample is
compared with CPU PyTorch; no sample may fall back to the CPU."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

DEV = "tpu"


@pytest.fixture(autouse=True)
def no_fallback():
    before = dict(torch_pjrt.metrics()["fallback_ops"])
    yield
    after = torch_pjrt.metrics()["fallback_ops"]
    assert {k: v for k, v in after.items() if v != before.get(k, 0)} == {}


# --- histc -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bins,lo,hi", [(7, 0, 0), (5, -1, 1), (3, 0.5, 0.5), (1, -3, 3)])
def test_histc_floats_match_cpu(dtype, bins, lo, hi):
    torch.manual_seed(bins)
    x = torch.randn(4, 25).to(dtype)
    expected = torch.histc(x.float(), bins=bins, min=lo, max=hi).to(dtype)
    got = torch.histc(x.to(DEV), bins=bins, min=lo, max=hi)
    assert got.dtype == dtype and got.shape == (bins,)
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_histc_integers_count_expert_ids(dtype):
    """Transformers' grouped_mm experts path: histc(ids.int(), bins=E,
    min=0, max=E-1) on non-CPU devices. CPU refuses integers, so the
    reference is the float histogram."""
    ids = torch.randint(0, 8, (64,)).to(dtype)
    got = torch.histc(ids.to(DEV), bins=8, min=0, max=7)
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), torch.histc(ids.float(), bins=8, min=0, max=7).to(dtype))
    # The data's own range when min == max.
    torch.testing.assert_close(torch.histc(ids.to(DEV), bins=3).cpu(),
                               torch.histc(ids.float(), bins=3).to(dtype))


def test_histc_edges_nan_and_empty():
    x = torch.tensor([0.0, 1.0, 2.0, 2.0, 3.0, float("nan"), 7.5, -1.0])
    torch.testing.assert_close(torch.histc(x.to(DEV), bins=4, min=0, max=3).cpu(),
                               torch.histc(x, bins=4, min=0, max=3))
    torch.testing.assert_close(torch.histc(torch.tensor([2.0, 2.0]).to(DEV), bins=4).cpu(),
                               torch.histc(torch.tensor([2.0, 2.0]), bins=4))
    empty = torch.empty(0)
    torch.testing.assert_close(torch.histc(empty.to(DEV), bins=4).cpu(), torch.histc(empty, bins=4))
    out = torch.empty(5, device=DEV)
    torch.histc(x[:5].to(DEV), bins=5, min=0, max=4, out=out)
    torch.testing.assert_close(out.cpu(), torch.histc(x[:5], bins=5, min=0, max=4))


@pytest.mark.parametrize("kwargs,match", [({"bins": 0}, "bins must be > 0"),
                                          ({"bins": 3, "min": 2, "max": 1}, "max must be larger than min")])
def test_histc_bad_arguments_raise_like_cpu(kwargs, match):
    x = torch.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=match):
        torch.histc(x, **kwargs)
    with pytest.raises(RuntimeError, match=match):
        torch.histc(x.to(DEV), **kwargs)


def test_histc_non_finite_range_raises():
    x = torch.tensor([1.0, float("inf")])
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(x, bins=3)
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(x.to(DEV), bins=3).cpu()


def test_histc_bool_refused():
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.histc(torch.tensor([True, False], device=DEV), bins=2)


# --- bincount ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("weights", [None, torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("minlength", [0, 20])
def test_bincount_matches_cpu(dtype, weights, minlength):
    torch.manual_seed(1)
    x = torch.randint(0, 12, (40,)).to(dtype)
    w = None if weights is None else torch.randn(40).to(weights)
    expected = torch.bincount(x, w if weights != torch.float16 else w.double(), minlength=minlength)
    got = torch.bincount(x.to(DEV), None if w is None else w.to(DEV), minlength=minlength)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-3, atol=1e-3)


def test_bincount_empty_and_errors():
    e = torch.empty(0, dtype=torch.long)
    torch.testing.assert_close(torch.bincount(e.to(DEV), minlength=3).cpu(), torch.bincount(e, minlength=3))
    for bad in (torch.tensor([-1]), torch.tensor([[1]])):
        with pytest.raises(RuntimeError, match="non-negative integral"):
            torch.bincount(bad.to(DEV))
    with pytest.raises(RuntimeError, match="same length"):
        torch.bincount(torch.tensor([1, 2], device=DEV), torch.tensor([1.0], device=DEV))
    with pytest.raises(RuntimeError, match="minlength"):
        torch.bincount(torch.tensor([1, 2], device=DEV), minlength=-1)


# --- floor_divide ------------------------------------------------------------

def test_floor_divide_matches_cpu():
    a = torch.randint(-20, 20, (16,))
    b = torch.randint(1, 5, (16,))
    torch.testing.assert_close((a.to(DEV) // b.to(DEV)).cpu(), a // b)
    torch.testing.assert_close((a.to(DEV) // 3).cpu(), a // 3)
    x = torch.randn(16)
    torch.testing.assert_close((x.to(DEV) // 0.3).cpu(), x // 0.3)
    y = a.clone().to(DEV)
    y //= 4
    torch.testing.assert_close(y.cpu(), a // 4)


# --- _grouped_mm -------------------------------------------------------------

OFFS = torch.tensor([3, 3, 8, 16], dtype=torch.int32)  # group 1 empty


def _layouts(dtype):
    torch.manual_seed(2)
    r = lambda *s: torch.randn(*s).to(dtype)  # noqa: E731
    return {
        "2d_3d": (r(16, 8), r(4, 8, 16), OFFS),   # tokens sorted by expert
        "3d_2d": (r(4, 8, 8), r(8, 16), OFFS),    # columns split by group
        "2d_2d": (r(8, 16), r(16, 16), OFFS),     # the contraction split: weight grads
        "3d_3d": (r(4, 8, 8), r(4, 8, 16), None),
    }


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("layout", ["2d_3d", "3d_2d", "2d_2d", "3d_3d"])
def test_grouped_mm_forward_matches_cpu(dtype, tol, layout):
    a, b, offs = _layouts(dtype)[layout]
    expected = torch._grouped_mm(a, b, offs)
    got = torch._grouped_mm(a.to(DEV), b.to(DEV), None if offs is None else offs.to(DEV))
    assert got.dtype == dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=tol, atol=tol)


def test_grouped_mm_transposed_weights_and_functional():
    """Transformers passes weight.transpose(-2, -1), a non-contiguous view."""
    x = torch.randn(16, 8)
    w = torch.randn(4, 16, 8)
    expected = torch.nn.functional.grouped_mm(x, w.transpose(-2, -1), offs=OFFS)
    got = torch.nn.functional.grouped_mm(x.to(DEV), w.to(DEV).transpose(-2, -1), offs=OFFS.to(DEV))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_grouped_mm_backward_matches_cpu():
    x = torch.randn(16, 8)
    w = torch.randn(4, 8, 16)
    g = torch.randn(16, 16)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch._grouped_mm(xc, wc, OFFS).backward(g)
    xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    torch._grouped_mm(xt, wt, OFFS.to(DEV)).backward(g.to(DEV))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args,match", [
    (lambda: (torch.randn(16, 8), torch.randn(4, 8, 16), None), "Have to provide offsets"),
    (lambda: (torch.randn(16, 8), torch.randn(4, 8, 16), OFFS.long()), "int32"),
    (lambda: (torch.randn(16, 8), torch.randn(3, 8, 16), OFFS), "batch sizes have to match"),
    (lambda: (torch.randn(16, 8), torch.randn(4, 4, 16), OFFS), "contraction dimension"),
    (lambda: (torch.randn(16, 8).long(), torch.randn(4, 8, 16).long(), OFFS), "Float32, BFloat16 or Float16"),
    (lambda: (torch.randn(8), torch.randn(4, 8, 16), OFFS), "2 or 3d"),
])
def test_grouped_mm_bad_input_raises_like_cpu(args, match):
    a, b, offs = args()
    with pytest.raises(RuntimeError, match=match):
        torch._grouped_mm(a, b, offs)
    with pytest.raises(RuntimeError, match=match):
        torch._grouped_mm(a.to(DEV), b.to(DEV), None if offs is None else offs.to(DEV))


def test_grouped_mm_float32_under_torch_compile():
    """torch 2.13's meta kernel took bfloat16 only; torch_pjrt widens it to
    the dtypes the kernels run, so a float32 MoE layer compiles."""
    x, w = torch.randn(16, 8), torch.randn(4, 8, 16)

    def f(a, b, offs):
        return torch._grouped_mm(a, b, offs) * 2

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    got = compiled(x.to(DEV), w.to(DEV), OFFS.to(DEV))
    torch.testing.assert_close(got.cpu(), f(x, w, OFFS), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="Offsets have to be int32"):
        compiled(x.to(DEV), w.to(DEV), OFFS.long().to(DEV))


def test_grouped_mm_past_the_gather_limit():
    """Past 2^24 rows x K x N (or under 16 groups) the 2-D x 3-D layout
    multiplies every row by every group's weights and masks; the result is
    the same."""
    torch.manual_seed(3)
    x, w = torch.randn(256, 256), torch.randn(4, 256, 264)
    offs = torch.tensor([60, 60, 200, 250], dtype=torch.int32)  # 6 rows past the groups
    expected = torch._grouped_mm(x, w, offs)[:250]
    got = torch._grouped_mm(x.to(DEV), w.to(DEV), offs.to(DEV)).cpu()
    torch.testing.assert_close(got[:250], expected, rtol=1e-4, atol=1e-4)
    assert torch.count_nonzero(got[250:]) == 0


def test_grouped_mm_many_groups_gathers_weights():
    """From 16 groups, small products gather each row's group weights."""
    torch.manual_seed(4)
    x, w = torch.randn(40, 16), torch.randn(32, 16, 8)
    offs = torch.arange(1, 33, dtype=torch.int32) + 4  # 4 rows past, groups of 1
    offs[10:] = offs[10:] + 1  # group 10 holds 2 rows
    offs = offs.clamp(max=37)  # the last groups empty
    expected = torch._grouped_mm(x, w, offs)[:37]
    got = torch._grouped_mm(x.to(DEV), w.to(DEV), offs.to(DEV)).cpu()
    torch.testing.assert_close(got[:37], expected, rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(got[37:]) == 0
