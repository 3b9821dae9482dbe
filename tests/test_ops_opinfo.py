"""Every op family the tpu device lowers natively, checked against CPU
PyTorch over OpInfo samples in float32, an integer dtype and bfloat16, with
no CPU fallback allowed."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt
from op_parity import OpCase, check_samples

CASES = [
    # creation
    OpCase("zeros_like"), OpCase("ones_like"), OpCase("full_like"), OpCase("fill"),
    OpCase("zero_"), OpCase("arange"), OpCase("linspace"), OpCase("eye"),
    OpCase("new_zeros"), OpCase("new_ones"), OpCase("new_full"),
    # unary
    OpCase("exp"), OpCase("expm1"), OpCase("log"), OpCase("log1p"), OpCase("log2"),
    OpCase("log10"), OpCase("sqrt"), OpCase("rsqrt"), OpCase("sin"), OpCase("cos"),
    OpCase("tan", rtol_scale=5), OpCase("tanh"), OpCase("sigmoid"), OpCase("asin"),
    OpCase("acos"), OpCase("atan"), OpCase("sinh"), OpCase("cosh"), OpCase("asinh"),
    OpCase("acosh"), OpCase("atanh"), OpCase("erf"), OpCase("erfinv", rtol_scale=5),
    OpCase("lgamma", rtol_scale=5),
    OpCase("digamma", rtol_scale=10),
    OpCase("reciprocal"),
    OpCase("neg"), OpCase("abs"), OpCase("sign"), OpCase("floor"), OpCase("ceil"),
    OpCase("round"), OpCase("trunc"), OpCase("bitwise_not"), OpCase("logical_not"),
    # binary
    OpCase("add"), OpCase("sub"), OpCase("mul"), OpCase("div", "no_rounding_mode"),
    OpCase("div", "trunc_rounding"), OpCase("div", "floor_rounding"), OpCase("true_divide"),
    OpCase("remainder"), OpCase("fmod"), OpCase("pow", rtol_scale=5), OpCase("atan2"),
    OpCase("maximum"), OpCase("minimum"), OpCase("bitwise_and"), OpCase("bitwise_or"),
    OpCase("bitwise_xor"), OpCase("eq"), OpCase("ne"), OpCase("lt"), OpCase("le"),
    OpCase("gt"), OpCase("ge"), OpCase("logical_and"), OpCase("logical_or"),
    OpCase("logical_xor"), OpCase("where"), OpCase("clamp"), OpCase("clamp_min"),
    OpCase("clamp_max"), OpCase("masked_fill"),
    # reductions
    OpCase("sum"), OpCase("mean"), OpCase("prod"), OpCase("amax"), OpCase("amin"),
    OpCase("max", "reduction_with_dim"), OpCase("max", "reduction_no_dim"),
    OpCase("min", "reduction_with_dim"), OpCase("min", "reduction_no_dim"),
    OpCase("argmax"), OpCase("argmin"), OpCase("var"), OpCase("std"),
    OpCase("linalg.vector_norm"), OpCase("any"), OpCase("all"), OpCase("logsumexp"),
    # matmul family
    OpCase("mm"), OpCase("bmm"), OpCase("addmm"), OpCase("matmul"),
    OpCase("nn.functional.linear"), OpCase("baddbmm"), OpCase("dot"), OpCase("mv"),
    # shape ops
    OpCase("cat"), OpCase("stack"), OpCase("split"), OpCase("chunk"), OpCase("expand"),
    OpCase("permute"), OpCase("transpose"), OpCase("reshape"), OpCase("view"),
    OpCase("squeeze"), OpCase("unsqueeze"), OpCase("flatten"), OpCase("narrow"),
    OpCase("select"), OpCase("contiguous"), OpCase("clone"), OpCase("t"),
    # mixture-of-experts routing
    OpCase("histc"), OpCase("bincount"), OpCase("floor_divide"),
    # linear algebra and data-sized results Transformers' tests reach
    OpCase("linalg.cholesky", rtol_scale=50), OpCase("linalg.cholesky_ex", rtol_scale=50),
    OpCase("cholesky", rtol_scale=50), OpCase("linalg.solve_triangular", rtol_scale=50),
    OpCase("equal"), OpCase("unique_consecutive"), OpCase("unique"),
    # binary math and reductions the OpInfo census found falling back
    OpCase("fmax"), OpCase("fmin"), OpCase("heaviside"), OpCase("logaddexp"),
    OpCase("logaddexp2"), OpCase("hypot"), OpCase("copysign"), OpCase("trace"),
    OpCase("std_mean"), OpCase("var_mean"), OpCase("nansum"), OpCase("count_nonzero"),
    OpCase("aminmax"), OpCase("rsub"), OpCase("special.xlog1py"),
]

DTYPES = [torch.float32, torch.int64, torch.bfloat16]


def case_id(case: OpCase) -> str:
    return case.name + (f".{case.variant}" if case.variant else "")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_op_matches_cpu(case: OpCase, dtype: torch.dtype):
    torch_pjrt.reset_metrics()
    ran = check_samples(case, dtype)
    if ran == 0:
        pytest.skip(f"{case_id(case)} has no CPU support or samples for {dtype}")
    fallbacks = torch_pjrt.metrics()["fallback_ops"]
    assert fallbacks == {}, f"{case_id(case)} fell back to the CPU: {fallbacks}"


DIFFERENTIABLE = [c for c in CASES if c.name not in {
    "zeros_like", "ones_like", "full_like", "fill", "zero_", "arange", "linspace", "eye",
    "new_zeros", "new_ones", "new_full", "bitwise_not", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_xor", "any", "all", "argmax", "argmin", "sign", "floor", "ceil",
    "round", "trunc", "histc", "bincount", "floor_divide", "equal", "unique_consecutive", "unique",
    "heaviside", "count_nonzero", "aminmax"}]


@pytest.mark.parametrize("case", DIFFERENTIABLE, ids=case_id)
def test_backward_matches_cpu(case: OpCase):
    """The backward ops autograd runs for these ops, in float32, on the device."""
    from op_parity import check_gradients

    torch_pjrt.reset_metrics()
    if check_gradients(case) == 0:
        pytest.skip(f"{case_id(case)} has no differentiable samples")
    fallbacks = torch_pjrt.metrics()["fallback_ops"]
    assert fallbacks == {}, f"{case_id(case)} backward fell back to the CPU: {fallbacks}"


BOOL_CASES = [OpCase("add"), OpCase("mul"), OpCase("maximum"), OpCase("fmax"), OpCase("fmin"),
              OpCase("heaviside"), OpCase("where"), OpCase("count_nonzero"), OpCase("aminmax")]


@pytest.mark.parametrize("case", BOOL_CASES, ids=case_id)
def test_bool_matches_cpu(case: OpCase):
    """bool inputs, where the alpha and promotion rules differ (add of two
    bools is a logical or)."""
    torch_pjrt.reset_metrics()
    if check_samples(case, torch.bool) == 0:
        pytest.skip(f"{case_id(case)} has no CPU support or samples for bool")
    assert torch_pjrt.metrics()["fallback_ops"] == {}
