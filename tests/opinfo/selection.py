"""What the OpInfo census covers: which ops of PyTorch's op_db, which dtypes
of each, and which ops or samples cannot be compared (and why). Needs torch
only, not torch_pjrt, so the census driver can plan without a device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

SAMPLES = 8  # forward samples per op and dtype
BACKWARD_SAMPLES = 4  # float32 samples with an input requiring grad
BACKWARD_SCAN = 16  # generated samples looked through to find them

# Ops whose every sample draws random numbers: the device's generator is not
# CPU's, so values cannot match. (tests/test_random.py checks the device's.)
RANDOM_OPS: dict[str, str] = {name: "draws random numbers" for name in (
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "uniform", "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "nn.functional.gumbel_softmax", "pca_lowrank", "svd_lowrank",
)}


def _dropout_p(sample) -> float:
    return float(sample.kwargs.get("p", sample.args[0] if sample.args else 0.5))


def _dropout_is_random(sample) -> bool:
    return bool(sample.kwargs.get("training", True)) and 0 < _dropout_p(sample) < 1


# Ops with some random samples: OpInfo name -> predicate on a sample. Their
# other samples (training=False, p=0 or 1) are compared like any.
RANDOM_SAMPLES: dict[str, Callable[[Any], bool]] = {
    "nn.functional.dropout": _dropout_is_random,
    "nn.functional.dropout2d": _dropout_is_random,
    "nn.functional.dropout3d": _dropout_is_random,
    "nn.functional.alpha_dropout": _dropout_is_random,
    "nn.functional.feature_alpha_dropout": _dropout_is_random,
    "nn.functional.rrelu": lambda s: bool(s.kwargs.get("training", False))
    and s.kwargs.get("lower", 1 / 8) != s.kwargs.get("upper", 1 / 3),
    "nn.functional.scaled_dot_product_attention": lambda s: s.kwargs.get("dropout_p", 0.0) > 0,
    # dropout_p is the tenth positional argument
    "nn.functional.multi_head_attention_forward": lambda s: bool(s.kwargs.get("training", True))
    and len(s.args) > 9 and float(s.args[9]) > 0,
}


# Tensors an op takes on the host even when its input is on an accelerator
# (as on CUDA): OpInfo name -> positions in (input, *args) left on the CPU.
HOST_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "tensor_split": (1,),  # tensor_indices_or_sections must be a CPU tensor
}


# Ops whose indices PyTorch leaves unspecified among equal elements (their
# documentation says so): the indices are checked by what they select, not
# for equality with CPU's. OpInfo name -> a function of the op's arguments
# giving (dim, keepdim, values_in_any_order), or None where the op's result
# is fully specified (a stable sort, a median over all elements).
def _sort(input, dim=-1, descending=False, stable=False):
    return None if stable else (dim, True, False)


def _topk(input, k, dim=-1, largest=True, sorted=True):
    return (dim, True, not sorted)


def _kthvalue(input, k, dim=-1, keepdim=False):
    return (dim, keepdim, False)


def _mode(input, dim=-1, keepdim=False):
    return (dim, keepdim, False)


def _median(input, dim=None, keepdim=False):
    return None if dim is None else (dim, keepdim, False)


TIES_UNSPECIFIED: dict[str, Callable[..., tuple[int, bool, bool] | None]] = {
    "sort": _sort, "argsort": _sort, "topk": _topk, "kthvalue": _kthvalue, "mode": _mode,
    "median": _median, "nanmedian": _median,
}


def ties_unspecified(op, sample) -> tuple[int, bool, bool] | None:
    """(dim, keepdim, values_in_any_order) when this sample's indices are
    unspecified among equal elements."""
    rule = TIES_UNSPECIFIED.get(op.name)
    if rule is None:
        return None
    try:
        return rule(sample.input, *sample.args, **sample.kwargs)
    except TypeError:  # a signature the rule does not know: compare exactly
        return None


def op_key(op) -> str:
    """The OpInfo's name, with its variant after a dot."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_index() -> dict[str, Any]:
    """Every OpInfo of op_db by op_key, in op_db's order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_named(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype), name
    return dtype


# OpInfos whose dtypes claim the CPU, but that run on CUDA only (every
# sample raises on the CPU): op name prefix -> why.
CUDA_ONLY = {"jiterator_": "CUDA only (jiterator kernels)"}
# OpInfos that take no tensor and no device: nothing of them runs on one.
NO_DEVICE = {"broadcast_shapes": "computes a shape from shapes: no tensor and no device argument"}


def _not_censused(op) -> str | None:
    """Why an op of op_db is left out of the census whatever its dtypes."""
    if op.name in NO_DEVICE:
        return NO_DEVICE[op.name]
    return next((why for prefix, why in CUDA_ONLY.items() if op.name.startswith(prefix)), None)


def census_dtypes(op) -> list[torch.dtype]:
    """float32, int64 (else int32), bool, bfloat16: those the op supports on
    the CPU and PyTorch declares for CUDA."""
    if _not_censused(op):
        return []
    both = set(op.supported_dtypes("cpu")) & set(op.supported_dtypes("cuda"))
    chosen = [torch.float32] if torch.float32 in both else []
    chosen += [d for d in (torch.int64, torch.int32) if d in both][:1]
    chosen += [d for d in (torch.bool, torch.bfloat16) if d in both]
    return chosen


def has_backward(op) -> bool:
    """Whether the census checks the op's float32 gradients."""
    return (bool(op.supports_autograd) and torch.float32 in census_dtypes(op)
            and torch.float32 in op.supported_backward_dtypes("cpu"))


def op_skip_reason(op) -> str | None:
    """Why none of the op's samples can be compared, if so."""
    if op.name in RANDOM_OPS:
        return RANDOM_OPS[op.name]
    if getattr(op, "has_nondeterministic_output", False):
        return "output is uninitialized or nondeterministic (OpInfo has_nondeterministic_output)"
    return None


def sample_skip_reason(op, sample) -> str | None:
    predicate = RANDOM_SAMPLES.get(op.name)
    if predicate is not None and predicate(sample):
        return "sample draws random numbers"
    return None


def census_ops() -> dict[str, Any]:
    """The ops the census covers (at least one census dtype), in op_db order."""
    return {key: op for key, op in op_index().items() if census_dtypes(op)}


def excluded_ops() -> dict[str, str]:
    """op_db's other ops, with why."""
    out = {}
    for key, op in op_index().items():
        if census_dtypes(op):
            continue
        cpu = {dtype_name(d) for d in op.supported_dtypes("cpu")}
        cuda = {dtype_name(d) for d in op.supported_dtypes("cuda")}
        if _not_censused(op):
            out[key] = _not_censused(op)
        elif not cpu:
            out[key] = "no CPU implementation"
        elif not cuda:
            out[key] = "no CUDA dtypes declared"
        else:
            shared = sorted(cpu & cuda)
            out[key] = "CPU and CUDA share only " + (", ".join(shared) if shared else "no dtype")
    return out


def every_kth(keys: list[str], target: int, offset: int = 0) -> list[str]:
    """A deterministic, evenly spread subset of about `target` keys."""
    step = max(1, round(len(keys) / max(1, target)))
    return keys[offset % step::step]
