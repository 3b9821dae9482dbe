"""Shared machinery for checking tpu ops against CPU PyTorch with OpInfo
samples (torch.testing._internal.common_methods_invocations.op_db)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

import torch_pjrt

DEVICE = torch_pjrt.settings().device_name

# Tolerances per dtype (rtol, atol). XLA's transcendental functions are not
# bit-identical to ATen's, so float32 allows a few ulps more than default.
TOLERANCES = {
    torch.float32: (2e-5, 2e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
    torch.float64: (1e-7, 1e-7),
    # Complex results compare like their real parts' dtype.
    torch.complex64: (2e-5, 2e-5),
    torch.complex128: (1e-7, 1e-7),
}


@dataclass(frozen=True)
class OpCase:
    name: str  # OpInfo name
    variant: str = ""  # OpInfo variant_test_name
    rtol_scale: float = 1.0  # loosen for ops whose XLA approximation differs more
    # Sorting with ties: which equal element comes first is not specified
    # for an unstable sort, so only the values are compared (not indices).
    values_only: bool = False
    # Samples to leave out (random ones cannot match CPU bit for bit).
    skip_sample: Callable | None = None


def find_opinfo(case: OpCase):
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        if op.name == case.name and op.variant_test_name == case.variant:
            return op
    raise LookupError(f"no OpInfo named {case.name!r} variant {case.variant!r}")


def to_device(x):
    return pytree.tree_map(lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t, x)


def to_cpu(x):
    return pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


def compare(expected, actual, dtype: torch.dtype, scale: float) -> None:
    flat_expected, _ = pytree.tree_flatten(expected)
    flat_actual, _ = pytree.tree_flatten(actual)
    assert len(flat_expected) == len(flat_actual)
    for e, a in zip(flat_expected, flat_actual):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor)
            assert a.device.type == DEVICE, f"result on {a.device}"
            # Tolerance follows the result's dtype (an int input may give floats).
            rtol, atol = TOLERANCES.get(e.dtype, (0, 0))
            torch.testing.assert_close(
                a.cpu(), e, rtol=rtol * scale, atol=atol * scale, equal_nan=True, check_stride=False
            )
        else:
            assert e == a


def check_samples(case: OpCase, dtype: torch.dtype, max_samples: int = 12) -> int:
    """Runs the op's samples on CPU and on the device; returns how many ran."""
    op = find_opinfo(case)
    if dtype not in op.supported_dtypes("cpu"):
        return 0
    ran = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        if ran >= max_samples:
            break
        if case.skip_sample is not None and case.skip_sample(sample):
            continue
        args = (sample.input, *sample.args)
        device_kwargs = to_device(sample.kwargs)
        # Factories (arange, eye) and *_like with a device= take the device
        # as an argument rather than from their inputs.
        has_tensor = any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(args))
        if "device" in device_kwargs or not has_tensor:
            device_kwargs["device"] = DEVICE
        try:
            expected = op(*args, **sample.kwargs)
        except Exception as error:  # CPU rejects it: the device must too
            try:
                op(*to_device(args), **device_kwargs)
            except Exception as device_error:
                assert type(device_error) is type(error) or isinstance(device_error, type(error)), (
                    f"{case.name}: CPU raised {type(error).__name__}, device raised "
                    f"{type(device_error).__name__}: {device_error}"
                )
                ran += 1
                continue
            raise AssertionError(f"{case.name}: CPU raised {error!r} but the device did not")
        actual = op(*to_device(args), **device_kwargs)
        if case.values_only:
            # The values output (first) as a multiset: topk(sorted=False)
            # leaves the order open, and indices of ties are unspecified.
            keep = lambda out: pytree.tree_leaves(out)[0].cpu().flatten().sort().values  # noqa: E731
            expected, actual = keep(expected), keep(actual).to(DEVICE)
        compare(expected, actual, dtype, case.rtol_scale)
        ran += 1
    return ran


def check_gradients(case: OpCase, max_samples: int = 6) -> int:
    """Backward parity in float32: gradients of a weighted sum of the outputs
    with respect to every floating input, CPU against the device."""
    op = find_opinfo(case)
    if not op.supports_autograd or torch.float32 not in op.supported_dtypes("cpu"):
        return 0
    ran = 0
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=True):
        if ran >= max_samples:
            break
        if case.skip_sample is not None and case.skip_sample(sample):
            continue
        args = (sample.input, *sample.args)
        leaves = [t for t in pytree.tree_leaves((args, sample.kwargs))
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        if not leaves:
            continue
        try:
            expected = op(*args, **sample.kwargs)
        except Exception:
            continue
        outs = [t for t in pytree.tree_leaves(expected)
                if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs:
            continue
        torch.manual_seed(ran)
        weights = [torch.randn(o.shape) for o in outs]
        cpu_grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, weights)), leaves,
                                        allow_unused=True)
        dev_leaves = [t.detach().to(DEVICE).requires_grad_(True) for t in leaves]
        mapping = {id(t): d for t, d in zip(leaves, dev_leaves)}
        dev_args, dev_kwargs = pytree.tree_map(
            lambda t: mapping.get(id(t), t.to(DEVICE)) if isinstance(t, torch.Tensor) else t,
            (args, sample.kwargs))
        actual = op(*dev_args, **dev_kwargs)
        dev_outs = [t for t in pytree.tree_leaves(actual)
                    if isinstance(t, torch.Tensor) and t.requires_grad]
        dev_grads = torch.autograd.grad(
            sum((o * w.to(DEVICE)).sum() for o, w in zip(dev_outs, weights)), dev_leaves,
            allow_unused=True)
        for c, d in zip(cpu_grads, dev_grads):
            if c is None:
                continue
            assert d is not None and d.device.type == DEVICE
            torch.testing.assert_close(d.cpu(), c, rtol=1e-4 * case.rtol_scale,
                                       atol=1e-4 * case.rtol_scale)
        ran += 1
    return ran
