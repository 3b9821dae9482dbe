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
    OpCase("nn.functional.mse_loss"), OpCase("nn.functional.nll_loss"),
    OpCase("nn.functional.cross_entropy", rtol_scale=5),
    OpCase("index_select"), OpCase("gather"), OpCase("scatter"), OpCase("scatter_add"),
    OpCase("scatter_reduce", "sum"), OpCase("scatter_reduce", "prod"),
    OpCase("scatter_reduce", "mean"), OpCase("scatter_reduce", "amax"),
    OpCase("scatter_reduce", "amin"), OpCase("index_add"), OpCase("take_along_dim"),
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
