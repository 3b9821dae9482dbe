"""kthvalue, median, nanmedian and mode on tpu (csrc/ops/order_statistics.cc)
against CPU PyTorch: values equal, each index selecting its value (torch
leaves which of equal elements open), errors of the CPU's types, and no CPU
fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


def _data(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 5, (4, 9), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, 2] = float("nan")
        x[1, :] = float("nan")
        x[2, 5] = float("nan")
        x[3] = torch.randn(9, generator=g)
    return x


def _check(fn, x, dim=None):
    torch_pjrt.reset_metrics()
    expected = fn(x)
    got = fn(x.to(TPU))
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
        return
    values, indices = got[0].cpu(), got[1].cpu()
    torch.testing.assert_close(values, expected[0], equal_nan=True)
    assert indices.dtype == torch.int64 and indices.shape == expected[1].shape
    # The index picks the value (NaN where the value is NaN).
    picked = torch.take_along_dim(x, indices if indices.dim() == x.dim()
                                  else indices.unsqueeze(dim), dim)
    torch.testing.assert_close(picked.reshape(values.shape), values, equal_nan=True)


CASES = {
    "kthvalue_k3": (lambda x: torch.kthvalue(x, 3, 1), 1),
    "kthvalue_dim0_keepdim": (lambda x: torch.kthvalue(x, 2, 0, keepdim=True), 0),
    "median_dim": (lambda x: torch.median(x, 1), 1),
    "median_dim0_keepdim": (lambda x: torch.median(x, 0, keepdim=True), 0),
    "median_all": (lambda x: torch.median(x), None),
    "nanmedian_dim": (lambda x: torch.nanmedian(x, 1), 1),
    "nanmedian_all": (lambda x: torch.nanmedian(x), None),
    "mode_last_dim": (lambda x: torch.mode(x), -1),
    "mode_dim0_keepdim": (lambda x: torch.mode(x, 0, keepdim=True), 0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_order_statistic_matches_cpu(case, dtype):
    fn, dim = CASES[case]
    x = _data(dtype)
    if case.startswith("mode") and dtype.is_floating_point:
        x = x.nan_to_num(7.0)  # the CPU's mode of NaNs depends on its sort's order
    _check(fn, x, dim)


def test_median_of_nan_is_the_first_nan_and_nanmedian_skips_them():
    x = torch.tensor([[3.0, float("nan"), 1.0, float("nan")], [float("nan")] * 4])
    v, i = torch.median(x.to(TPU), 1)
    assert torch.isnan(v.cpu()).all() and i.cpu().tolist() == [1, 0]
    v, i = torch.nanmedian(x.to(TPU), 1)
    torch.testing.assert_close(v.cpu(), torch.tensor([1.0, float("nan")]), equal_nan=True)
    assert i.cpu().tolist() == [2, 0]


def test_mode_picks_the_smallest_of_the_most_frequent_and_its_last_index():
    x = torch.tensor([1, 2, 2, 1, 3, 3])
    v, i = torch.mode(x.to(TPU))
    assert (v.item(), i.item()) == (1, 3)


def test_bool_and_zero_dim_inputs():
    b = torch.tensor([[True, False, True], [False, False, True]])
    _check(lambda t: torch.mode(t, 1), b, 1)
    for fn in (torch.median, torch.nanmedian, lambda t: torch.kthvalue(t, 1)):
        with pytest.raises(NotImplementedError, match="Bool"):
            fn(b)
        with pytest.raises(NotImplementedError, match="Bool"):
            fn(b.to(TPU))
    s = torch.tensor(2.5)
    _check(lambda t: torch.kthvalue(t, 1), s, None)
    _check(lambda t: torch.median(t), s)


def test_empty_inputs_and_bad_k_raise_or_return_like_cpu():
    empty = torch.zeros(0)
    torch.testing.assert_close(torch.median(empty.to(TPU)).cpu(), torch.median(empty),
                               equal_nan=True)
    x = torch.randn(2, 3)
    for fn, error in [(lambda t: torch.kthvalue(t, 4, 1), RuntimeError),
                      (lambda t: torch.kthvalue(t, 0, 1), RuntimeError),
                      (lambda t: torch.median(t[:, :0], 1), IndexError),
                      (lambda t: torch.mode(t[:, :0], 1), IndexError)]:
        with pytest.raises(error):
            fn(x)
        with pytest.raises(error):
            fn(x.to(TPU))


def test_compiled_median_and_mode():
    x = _data(torch.float32).nan_to_num(7.0)

    def f(t):
        return torch.median(t, 1).values + torch.mode(t, 1).values

    compiled = torch.compile(f, backend="tpu")
    torch.testing.assert_close(compiled(x.to(TPU)).cpu(), f(x))
