"""embedding_bag on tpu (csrc/ops/embedding_bag.cc) against CPU PyTorch:
all four outputs of _embedding_bag / _embedding_bag_forward_only (the
auxiliary offset2bag, bag_size and max_indices exactly, placeholders
included), sum / mean / max with per_sample_weights, include_last_offset,
padding_idx, empty bags and NaN; gradients of the weight and the per-sample
weights; the offsets' and indices' checks; and no CPU fallback.

Every distinct configuration compiles a program, so the cases share shapes
(10 indices, 4 bags) where they can."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"
A = torch.ops.aten
EB, FWD = A._embedding_bag, A._embedding_bag_forward_only
SUM, MEAN, MAX = 0, 1, 2


def _weight(dtype=torch.float32):
    w = torch.randn(10, 3, generator=torch.Generator().manual_seed(0)).to(dtype)
    w[4, 1] = w[9, 1]  # a tie for max
    return w


IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 9, 0])
# Bags [0, 4), [4, 4) (empty), [4, 6), [6, 10); with include_last_offset the
# last offset ends the last bag.
OFFSETS = torch.tensor([0, 4, 4, 6])
OFFSETS_LAST = torch.tensor([0, 4, 4, 6, 10])
PSW = torch.rand(10, generator=torch.Generator().manual_seed(1))


def _compare(op, weight, mode, idx=IDX, offsets=OFFSETS, psw=None, include_last=False,
             padding_idx=-1):
    expected = op(weight, idx, offsets, False, mode, False, psw, include_last, padding_idx)
    got = op(weight.to(TPU), idx.to(TPU), offsets.to(TPU), False, mode, False,
             None if psw is None else psw.to(TPU), include_last, padding_idx)
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(weight.dtype, 1e-5)
    torch.testing.assert_close(got[0].cpu(), expected[0], rtol=tol, atol=tol, equal_nan=True)
    for g, e in zip(got[1:], expected[1:]):
        g = g.cpu()
        assert (g.dtype, g.shape) == (e.dtype, e.shape)
        assert torch.equal(g, e), (g, e)


def test_outputs_match_cpu_exactly():
    torch_pjrt.reset_metrics()
    w = _weight()
    for mode in (SUM, MEAN, MAX):
        _compare(EB, w, mode)
    _compare(EB, w, MAX, padding_idx=4)
    _compare(EB, w, SUM, psw=PSW)
    _compare(FWD, w, SUM, psw=PSW, padding_idx=2)  # a padded weighted sum: CPU's slow path
    # include_last_offset, and the forward-only placeholders' shapes.
    _compare(FWD, w, SUM, offsets=OFFSETS_LAST, include_last=True)
    _compare(EB, w, MAX, offsets=OFFSETS_LAST, include_last=True)
    # CPU's fast path (float types, sum or mean, no padding) ends the last
    # bag at the last offset; its other paths, at the end of the indices.
    trailing = torch.tensor([0, 4, 4, 6, 8])
    _compare(FWD, w, SUM, offsets=trailing, include_last=True)
    _compare(FWD, w.double(), SUM, offsets=trailing, include_last=True)
    # NaN: a bag's max is NaN when its first row is, and ignores later NaNs.
    wn = w.clone()
    wn[2, 0] = wn[5, 2] = float("nan")
    _compare(EB, wn, MAX)
    _compare(EB, wn, MAX, idx=IDX.roll(1))
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_dtypes_and_edge_shapes():
    torch_pjrt.reset_metrics()
    bf16 = _weight(torch.bfloat16)
    _compare(EB, bf16, MAX)
    _compare(EB, bf16, SUM, psw=PSW.bfloat16())
    _compare(EB, _weight(torch.float64), MEAN, padding_idx=4)
    _compare(EB, _weight(), MEAN, idx=IDX.int(), offsets=OFFSETS.int())
    _compare(EB, _weight(), MAX, idx=torch.tensor([], dtype=torch.long), offsets=torch.tensor([0, 0]))
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def _run(device, w, idx, offsets, psw, **kw):
    w = w.detach().clone().to(device).requires_grad_()
    psw = None if psw is None else psw.detach().clone().to(device).requires_grad_()
    out = F.embedding_bag(idx.to(device), w, None if offsets is None else offsets.to(device),
                          per_sample_weights=psw, **kw)
    out.backward(torch.linspace(-1, 2, out.numel()).reshape(out.shape).to(device))
    return out.detach().cpu(), w.grad.cpu(), None if psw is None else psw.grad.cpu()


def _compare_grads(w, idx, offsets, psw=None, **kw):
    expected = _run("cpu", w, idx, offsets, psw, **kw)
    got = _run(TPU, w, idx, offsets, psw, **kw)
    for g, e in zip(got, expected):
        if e is not None:
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    return got


def test_gradients_match_cpu():
    torch_pjrt.reset_metrics()
    w = _weight()
    for mode in ("sum", "mean", "max"):
        _compare_grads(w, IDX, OFFSETS, mode=mode)
    _compare_grads(w, IDX, OFFSETS, PSW, mode="sum")
    _compare_grads(w, IDX, OFFSETS, mode="max", padding_idx=4)
    _compare_grads(w, IDX, OFFSETS_LAST, mode="sum", include_last_offset=True)
    _compare_grads(w, IDX.reshape(2, 5), None, mode="mean")  # 2-D: bags of 5
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_large_bags_take_the_scatter_and_gather_paths():
    # Past ops/segments.cc's pairwise-comparison size: scatters, gathers and
    # a prefix sum.
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(200, 4, generator=gen)
    idx = torch.randint(0, 200, (600,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long),
                         torch.randint(0, 601, (149,), generator=gen).sort().values])
    _compare(EB, w, MEAN, idx=idx, offsets=offsets)
    _compare_grads(w, idx, offsets, mode="max")
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_scale_grad_by_freq_divides_by_each_index_frequency():
    w = _weight()
    # Every index equally frequent: CPU agrees.
    even = torch.tensor([1, 3, 3, 1, 5, 5, 7, 7, 2, 2])
    for mode in ("sum", "mean"):
        _compare_grads(w, even, OFFSETS, mode=mode, scale_grad_by_freq=True)
    # Mixed frequencies: CPU 2.13 divides some rows by another index's count
    # (pytorch/pytorch#190063); tpu divides each by its own, as CUDA does.
    _, grad, _ = _run(TPU, w, IDX, OFFSETS, None, mode="sum", scale_grad_by_freq=True)
    _, plain, _ = _run("cpu", w, IDX, OFFSETS, None, mode="sum")
    counts = torch.bincount(IDX, minlength=10).clamp(min=1).unsqueeze(1)
    torch.testing.assert_close(grad, plain / counts, rtol=1e-5, atol=1e-6)


def test_bad_offsets_and_indices_raise_like_cpu():
    w = _weight()
    bad_index, negative_index = IDX.clone(), IDX.clone()
    bad_index[3], negative_index[5] = 10, -1
    # Offsets of OFFSETS' shape: the programs compiled above check them.
    cases = [
        (IDX, torch.tensor([1, 4, 4, 6]), SUM),    # offsets[0] != 0
        (IDX, torch.tensor([0, 4, 4, 11]), MEAN),  # offsets[-1] > len(indices)
        (IDX, torch.tensor([0, 4, -1, 6]), MAX),   # an offset below 0: index_add's IndexError
        (IDX, torch.tensor([0, 6, 4, 6]), SUM),    # decreasing offsets on CPU's fast path
        (bad_index, OFFSETS, SUM),
        (negative_index, OFFSETS, MAX),
    ]
    for idx, offsets, mode in cases:
        with pytest.raises(Exception) as cpu_error:
            EB(w, idx, offsets, False, mode)
        with pytest.raises(cpu_error.type):
            EB(w.to(TPU), idx.to(TPU), offsets.to(TPU), False, mode)[0].cpu()
    with pytest.raises(RuntimeError, match="per_sample_weights only supported"):
        EB(w.to(TPU), IDX.to(TPU), OFFSETS.to(TPU), False, MEAN, False, PSW.to(TPU))
    # The device is usable afterwards.
    assert F.embedding_bag(IDX.to(TPU), w.to(TPU), OFFSETS.to(TPU)).cpu().shape == (4, 3)
