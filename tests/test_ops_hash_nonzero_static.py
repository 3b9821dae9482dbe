"""hash_tensor and nonzero_static on tpu against CPU PyTorch: values, edge
shapes and the CPU's errors, with no fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

TPU = "tpu"


@pytest.mark.parametrize("x, kwargs", [
    (torch.tensor([1.0, 2.0, 3.0]), {}),
    (torch.tensor([-1], dtype=torch.int32), {}),
    (torch.tensor([float("nan"), 2.0, -0.0]), {}),
    (torch.tensor(3.0), {}),
    (torch.tensor([[1, 2], [3, 4]]), {"dim": 1}),
    (torch.tensor([[1, 2], [3, 4]]).bfloat16(), {"dim": 0, "keepdim": True}),
    (torch.tensor([True, False, True]), {}),
    (torch.randn(3, 4, 5, dtype=torch.float64), {"dim": [0, 2]}),
])
def test_hash_tensor_matches_cpu(x, kwargs):
    torch_pjrt.reset_metrics()
    got = torch.hash_tensor(x.to(TPU), **kwargs).cpu()
    assert got.dtype == torch.uint64
    assert torch.equal(got, torch.hash_tensor(x, **kwargs))
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_hash_tensor_errors_like_cpu():
    for x, kwargs, error in [(torch.zeros(0), {}, RuntimeError),
                             (torch.zeros(2, 0), {"dim": 1}, IndexError),
                             (torch.ones(2), {"mode": 1}, RuntimeError)]:
        with pytest.raises(error):
            torch.hash_tensor(x, **kwargs)
        with pytest.raises(error):
            torch.hash_tensor(x.to(TPU), **kwargs)


@pytest.mark.parametrize("x, kwargs", [
    (torch.tensor([[0, 1], [2, 0]]), {"size": 3}),
    (torch.tensor(5), {"size": 2}),
    (torch.tensor([1, 1, 1]), {"size": 2, "fill_value": 7}),
    (torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0)) > 0, {"size": 40}),
    (torch.zeros(0, 3), {"size": 2}),
    (torch.tensor([0.0, float("nan"), -0.0]), {"size": 4}),
])
def test_nonzero_static_matches_cpu(x, kwargs):
    torch_pjrt.reset_metrics()
    got = torch.nonzero_static(x.to(TPU), **kwargs).cpu()
    assert torch.equal(got, torch.nonzero_static(x, **kwargs))
    assert torch_pjrt.metrics()["fallback_ops"] == {}
