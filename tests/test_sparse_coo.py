"""Sparse COO tensors on tpu (csrc/backend/sparse_coo.cc): dense to sparse
on the device, moves between the CPU and tpu, indices, values, nnz and
to_dense, against CPU PyTorch. Sparse arithmetic has no tpu kernels: it
raises NotImplementedError naming the op rather than running anything
wrong."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


def _dense(dtype):
    x = torch.tensor([[0, 1, 0, 4], [2, 0, 3, 0], [0, 0, 0, 0]]).to(dtype)
    return x


def _same_sparse(want, got):
    assert got.device.type == TPU and got.layout == torch.sparse_coo
    got = got.cpu()
    assert got.sparse_dim() == want.sparse_dim() and got.dense_dim() == want.dense_dim()
    assert got._nnz() == want._nnz()
    assert torch.equal(got._indices(), want._indices())
    torch.testing.assert_close(got._values(), want._values())
    torch.testing.assert_close(got.to_dense(), want.to_dense())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_to_sparse_runs_on_the_device(dtype):
    x = _dense(dtype)
    torch_pjrt.reset_metrics()
    got = x.to(TPU).to_sparse()
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    _same_sparse(x.to_sparse(), got)
    torch.testing.assert_close(got.to_dense().cpu(), x)
    assert torch.equal(got.indices().cpu(), x.to_sparse().indices())
    assert torch.equal(got.values().cpu(), x.to_sparse().values())


def test_sparse_dims_moves_and_duplicates():
    x = torch.arange(24.0).reshape(2, 3, 4) * (torch.arange(3) % 2 == 0).reshape(1, 3, 1)
    _same_sparse(x.to_sparse(2), x.to(TPU).to_sparse(2))
    # An uncoalesced CPU tensor moved to tpu: duplicates add up in to_dense.
    s = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1], [2, 2, 0]]), torch.tensor([1.0, 2.0, 5.0]), (2, 3),
                                check_invariants=True)
    moved = s.to(TPU)
    assert not moved.is_coalesced()
    torch.testing.assert_close(moved.to_dense().cpu(), s.to_dense())


def test_what_is_not_there_says_so():
    s = _dense(torch.float32).to(TPU).to_sparse()
    with pytest.raises(NotImplementedError):
        s + s
    with pytest.raises(NotImplementedError, match="layout"):
        _dense(torch.float32).to(TPU).to_sparse(layout=torch.sparse_csr)
