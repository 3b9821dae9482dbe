"""The ops training needs (activations, softmax, normalisation, losses,
indexing, optimizer updates): forward over OpInfo samples in float32 and
bfloat16, and backward in float32, against CPU PyTorch, with no fallback."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt
from op_parity import OpCase, check_gradients, check_samples

CASES = [
    OpCase("nn.functional.relu"), OpCase("nn.functional.gelu"), OpCase("nn.functional.silu"),
    OpCase("nn.functional.mish"), OpCase("nn.functional.softplus"),
    OpCase("nn.functional.hardtanh"), OpCase("nn.functional.leaky_relu"),
    OpCase("nn.functional.elu"), OpCase("sigmoid"), OpCase("tanh"),
    OpCase("softmax"), OpCase("log_softmax"), OpCase("nn.functional.layer_norm", rtol_scale=5),
    OpCase("nn.functional.rms_norm", rtol_scale=5),
    OpCase("nn.functional.mse_loss"), OpCase("nn.functional.nll_loss"),
    OpCase("nn.functional.cross_entropy", rtol_scale=5),
    OpCase("index_select"), OpCase("gather"), OpCase("scatter"), OpCase("scatter_add"),
    OpCase("scatter_reduce", "sum"), OpCase("scatter_reduce", "prod"),
    OpCase("scatter_reduce", "mean"), OpCase("scatter_reduce", "amax"),
    OpCase("scatter_reduce", "amin"), OpCase("index_reduce", "prod"), OpCase("index_reduce", "mean"),
    OpCase("index_reduce", "amax"), OpCase("index_reduce", "amin"), OpCase("index_add"),
    OpCase("take_along_dim"),
    OpCase("nn.functional.embedding"), OpCase("index_put"), OpCase("addcmul"),
    OpCase("addcdiv"), OpCase("lerp"),
]


def case_id(case: OpCase) -> str:
    return case.name + (f".{case.variant}" if case.variant else "")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_forward_matches_cpu(case: OpCase, dtype: torch.dtype):
    torch_pjrt.reset_metrics()
    if check_samples(case, dtype) == 0:
        pytest.skip(f"{case_id(case)} has no CPU support or samples for {dtype}")
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_backward_matches_cpu(case: OpCase):
    torch_pjrt.reset_metrics()
    if check_gradients(case) == 0:
        pytest.skip(f"{case_id(case)} has no differentiable samples")
    assert torch_pjrt.metrics()["fallback_ops"] == {}


MISC_CASES = [
    OpCase("isnan"), OpCase("isinf"), OpCase("isposinf"), OpCase("isneginf"),
    OpCase("isfinite"), OpCase("nan_to_num"), OpCase("tril"), OpCase("triu"),
    OpCase("cumsum", rtol_scale=5), OpCase("cumprod", rtol_scale=5), OpCase("flip"),
    OpCase("roll"), OpCase("sort", values_only=True), OpCase("topk", values_only=True),
    OpCase("nn.functional.scaled_dot_product_attention", rtol_scale=5,
           skip_sample=lambda s: s.kwargs.get("dropout_p", 0.0) > 0),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", MISC_CASES, ids=case_id)
def test_misc_forward_matches_cpu(case: OpCase, dtype: torch.dtype):
    torch_pjrt.reset_metrics()
    if check_samples(case, dtype) == 0:
        pytest.skip(f"{case_id(case)} has no CPU support or samples for {dtype}")
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_argsort_and_sort_indices_without_ties():
    x = torch.randn(6, 50)  # float32 normal samples: no ties
    d = x.to(torch_pjrt.settings().device_name)
    for descending in (False, True):
        assert torch.equal(x.argsort(dim=1, descending=descending),
                           d.argsort(dim=1, descending=descending).cpu())
        values, indices = d.sort(dim=0, descending=descending)
        expected_values, expected_indices = x.sort(dim=0, descending=descending)
        assert torch.equal(values.cpu(), expected_values)
        assert torch.equal(indices.cpu(), expected_indices)
    top = d.topk(5, dim=1)
    assert torch.equal(top.indices.cpu(), x.topk(5, dim=1).indices)


NN_CASES = [
    OpCase("nn.functional.conv1d", rtol_scale=10), OpCase("nn.functional.conv2d", rtol_scale=10),
    OpCase("nn.functional.conv_transpose2d", rtol_scale=10),
    OpCase("nn.functional.conv3d", rtol_scale=10), OpCase("put"), OpCase("take"),
    OpCase("nn.functional.max_pool2d"), OpCase("nn.functional.avg_pool2d"),
    OpCase("nn.functional.adaptive_avg_pool2d"), OpCase("nn.functional.batch_norm", rtol_scale=5),
]




MORE_NN = [
    OpCase("nn.functional.smooth_l1_loss"), OpCase("nn.functional.binary_cross_entropy", rtol_scale=5),
    OpCase("nn.functional.binary_cross_entropy_with_logits", rtol_scale=5),
    OpCase("nn.functional.logsigmoid"), OpCase("xlogy"), OpCase("nn.functional.kl_div", rtol_scale=5),
    OpCase("nn.functional.l1_loss"), OpCase("nn.functional.hardswish"),
    OpCase("nn.functional.hardsigmoid"),
]




BREADTH = [
    OpCase("nn.functional.pad", "constant"), OpCase("nn.functional.pad", "reflect"),
    OpCase("nn.functional.pad", "replicate"), OpCase("nn.functional.interpolate", "nearest"),
    OpCase("nn.functional.interpolate", "bilinear", rtol_scale=10),
    OpCase("nn.functional.group_norm", rtol_scale=5), OpCase("bitwise_left_shift"),
    OpCase("bitwise_right_shift"), OpCase("index_copy"), OpCase("linalg.cross"),
    OpCase("bucketize"), OpCase("searchsorted"), OpCase("unique"), OpCase("nn.functional.one_hot"),
    OpCase("repeat"), OpCase("repeat_interleave"), OpCase("einsum", rtol_scale=5),
    OpCase("outer"), OpCase("diag"), OpCase("meshgrid", "list_of_tensors"), OpCase("masked_select"),
    OpCase("nonzero"), OpCase("argwhere"), OpCase("take_along_dim"),
]


@pytest.mark.parametrize("case", NN_CASES + MORE_NN + BREADTH, ids=case_id)
def test_forward_float_bf16_and_backward_match_cpu(case: OpCase):
    torch_pjrt.reset_metrics()
    ran = (check_samples(case, torch.float32) + check_samples(case, torch.bfloat16)
           + check_gradients(case))
    if ran == 0:
        pytest.skip(f"{case_id(case)} has no samples")
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_index_and_scatter_reduce_integer_mean_rounds_down():
    dev = torch_pjrt.settings().device_name
    self = torch.tensor([[-7, 4], [5, -3], [0, 0]])
    source = torch.tensor([[2, -8], [-4, 1], [3, 3]])
    index = torch.tensor([0, 0, 2])
    for include_self in (True, False):
        expected = self.index_reduce(0, index, source, "mean", include_self=include_self)
        got = self.to(dev).index_reduce(0, index.to(dev), source.to(dev), "mean", include_self=include_self)
        assert torch.equal(got.cpu(), expected)
        spread = index.view(-1, 1).expand_as(source)
        expected = self.scatter_reduce(0, spread, source, "mean", include_self=include_self)
        got = self.to(dev).scatter_reduce(0, spread.to(dev), source.to(dev), "mean", include_self=include_self)
        assert torch.equal(got.cpu(), expected)


def test_index_reduce_bad_reduce_raises_like_cpu():
    dev = torch_pjrt.settings().device_name
    x, index, source = torch.zeros(3, 2), torch.tensor([0, 1]), torch.ones(2, 2)
    with pytest.raises(RuntimeError, match="reduce"):
        x.index_reduce(0, index, source, "sum")
    with pytest.raises(RuntimeError, match="reduce"):
        x.to(dev).index_reduce(0, index.to(dev), source.to(dev), "sum")
