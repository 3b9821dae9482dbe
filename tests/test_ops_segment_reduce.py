"""torch._segment_reduce on tpu (csrc/ops/segment_reduce.cc) against CPU
PyTorch: sum, mean, max, min and prod over lengths or offsets, along axis 0
and batched along axis 1, with and without `initial`, empty segments, NaN,
ties and zeros; gradients of each reduction; the lengths' checks; and no
CPU fallback.

Every distinct configuration compiles a program, so the cases share shapes
where they can."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"
REDUCTIONS = ("sum", "mean", "max", "min", "prod")
NAN = float("nan")


def _data(dtype=torch.float32):
    # Segments of lengths [3, 0, 2, 4] along dim 0: a tie in column 0 of the
    # first, a NaN in the third, zeros (one and two) in the last.
    x = torch.tensor([[1.0, -2.0], [3.0, 0.5], [3.0, 1.5], [-2.0, 2.0], [NAN, -1.0],
                      [5.0, 0.0], [0.0, 3.0], [2.0, 0.0], [0.5, -0.5]])
    return x.to(dtype)


LENGTHS = torch.tensor([3, 0, 2, 4])
OFFSETS = torch.tensor([0, 3, 3, 5, 9])


def _reduce(device, data, reduce, grad=None, **kw):
    data = data.detach().clone().to(device).requires_grad_(grad is not None)
    kw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    out = torch._segment_reduce(data, reduce, **kw)
    if grad is None:
        return out.detach().cpu(), None
    out.backward(grad.to(device))
    return out.detach().cpu(), data.grad.cpu()


def _compare(data, reduce, grad=None, **kw):
    tol = 2e-2 if data.dtype == torch.bfloat16 else 1e-5
    expected = _reduce("cpu", data, reduce, grad, **kw)
    got = _reduce(TPU, data, reduce, grad, **kw)
    for g, e in zip(got, expected):
        if e is not None:
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_forward_and_gradient_match_cpu(reduce):
    torch_pjrt.reset_metrics()
    grad = torch.linspace(-2, 3, 8).reshape(4, 2)  # negative ones too: CPU splits only positive
    _compare(_data(), reduce, grad, lengths=LENGTHS)
    if reduce in ("mean", "max", "prod"):
        _compare(_data(), reduce, grad if reduce == "prod" else None, lengths=LENGTHS, initial=2.5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_offsets_batches_and_dtypes():
    torch_pjrt.reset_metrics()
    _compare(_data(), "sum", torch.ones(4, 2), offsets=OFFSETS, initial=1)
    _compare(_data(), "min", offsets=OFFSETS)
    # Offsets need not start at 0: rows before the first are in no segment.
    _compare(_data(), "min", offsets=torch.tensor([1, 3, 3, 5, 9]))
    # Batched: one row of lengths / offsets per position of the dims before axis.
    x = torch.randn(3, 5, 2, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([[2, 0, 3], [5, 0, 0], [1, 1, 3]])
    _compare(x, "mean", torch.randn(3, 3, 2), lengths=lengths, axis=1)
    _compare(x, "max", offsets=torch.cat([torch.zeros(3, 1, dtype=torch.long), lengths.cumsum(1)], 1),
             axis=-2)
    _compare(_data(torch.bfloat16), "prod", lengths=LENGTHS)
    _compare(_data(torch.float64), "max", lengths=LENGTHS.int())
    # Past ops/segments.cc's pairwise-comparison size: scatters and gathers.
    gen = torch.Generator().manual_seed(1)
    big = torch.randn(2, 200, generator=gen)
    big_lengths = torch.stack([torch.bincount(torch.randint(0, 200, (200,), generator=gen), minlength=200)
                               for _ in range(2)])
    _compare(big, "max", torch.randn(2, 200, generator=gen), lengths=big_lengths, axis=1)
    # unsafe skips the lengths' checks; a shortfall leaves rows out.
    _compare(_data(), "sum", lengths=torch.tensor([3, 0, 2, 2]), unsafe=True)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_bad_lengths_and_arguments_raise_like_cpu():
    x = _data()
    cases = [
        dict(lengths=torch.tensor([3, -1, 3, 4])),  # negative
        dict(lengths=torch.tensor([3, 1, 2, 4])),   # not summing to the size
        dict(offsets=torch.tensor([0, 3, 2, 5, 9])),  # a negative segment
        dict(lengths=torch.tensor([3, -1, 3, 4]), unsafe=True),
    ]
    for kw in cases:
        with pytest.raises(Exception) as cpu_error:
            torch._segment_reduce(x, "sum", **kw)
        with pytest.raises(cpu_error.type):
            _reduce(TPU, x, "sum", **kw)
    static = [(x, "median", dict(lengths=LENGTHS)), (x.long(), "sum", dict(lengths=LENGTHS)),
              (x, "sum", dict(lengths=LENGTHS.float())), (x, "sum", {}),
              (x, "sum", dict(lengths=LENGTHS, axis=1))]
    for data, reduce, kw in static:
        with pytest.raises(Exception) as cpu_error:
            torch._segment_reduce(data, reduce, **kw)
        with pytest.raises(cpu_error.type):
            _reduce(TPU, data, reduce, **kw)
    # The device is usable afterwards.
    assert _reduce(TPU, x, "sum", lengths=LENGTHS)[0].shape == (4, 2)
