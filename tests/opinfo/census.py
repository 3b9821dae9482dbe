"""The OpInfo census: PyTorch's op_db, sample by sample, on the tpu device
against CPU PyTorch, forward and (for differentiable ops) backward. A
library: tools/opinfo/run.py runs it over all ops and writes the table
(docs/op-coverage.md); tests/test_opinfo_census.py runs a subset of it in
`make test`. Which ops, dtypes and samples: selection.py.

Outcomes of one sample (STATUSES):
  ok            ran natively on the device and matched CPU
  cpu-error-ok  CPU raised and the device raised the same exception type
  fallback      matched, but at least one aten op ran through the CPU fallback
  wrong         ran, but a result (or an input the op mutates) differs
  error         the device raised and the CPU did not
  error-type    the CPU raised and the device raised another type, or nothing
  skip          cannot be compared (random numbers, uninitialized memory);
                always with its reason, from RANDOM_OPS or the OpInfo itself

Tolerances (tolerances()): the project's per-dtype defaults
(op_parity.TOLERANCES: assert_close's, with float32 loosened to 2e-5 because
XLA's transcendental functions are not bit-identical to ATen's), raised to
the largest toleranceOverride/precisionOverride op_db declares for that op
and dtype in a test that compares two implementations of the op
(TOLERANCE_SOURCES). Gradients start at 1e-4 (op_parity.check_gradients).
Where PyTorch leaves the order of equal elements open (sort, topk, median:
selection.TIES_UNSPECIFIED), the device's indices must select the same
values as CPU's rather than be the same indices (compare_outputs).

Each sample runs isolated: the device gets its own copy of the inputs (the
CPU call may mutate them; inputs an op mutates are compared too), results
are read back to the host before classifying (deferred device checks raise
there), exceptions are caught, and time_limit() bounds the device call.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

import torch_pjrt
from op_parity import TOLERANCES
from opinfo.selection import (BACKWARD_SAMPLES, BACKWARD_SCAN, HOST_ARGUMENTS, SAMPLES,
                              dtype_name, op_skip_reason, sample_skip_reason, ties_unspecified)

DEVICE = torch_pjrt.settings().device_name
GRAD_TOLERANCE = (1e-4, 1e-4)  # (rtol, atol) of float32 gradients

STATUSES = ("ok", "cpu-error-ok", "fallback", "wrong", "error", "error-type", "skip")
PASSING = frozenset({"ok", "cpu-error-ok"})
# How bad an outcome is: a known gap may improve but must not get worse.
SEVERITY = {"ok": 0, "cpu-error-ok": 0, "skip": 0, "fallback": 1, "wrong": 2, "error": 2,
            "error-type": 2}

# Tests in PyTorch's suite that compare two implementations of an op (device
# against CPU, decomposition or compiled code against eager, torch against a
# reference): the tolerances op_db gives them apply here. (class, test or
# None for the whole class). Device types None, cpu and cuda; not mps.
TOLERANCE_SOURCES = {
    ("TestCommon", "test_compare_cpu"), ("TestCommon", "test_noncontiguous_samples"),
    ("TestCommon", "test_variant_consistency_eager"), ("TestCommon", "test_python_ref"),
    ("TestCommon", "test_python_ref_torch_fallback"), ("TestCommon", "test_numpy_refs"),
    ("TestConsistency", None), ("TestUnaryUfuncs", None), ("TestBinaryUfuncs", None),
    ("TestBinaryUfuncsDevice", None), ("TestReductions", None),
    ("TestInductorOpInfo", "test_comprehensive"), ("TestDecomp", None),
}
GRAD_TOLERANCE_SOURCES = TOLERANCE_SOURCES | {
    ("TestCompositeCompliance", "test_backward"), ("TestGradients", None),
}


def _declared_tolerance(op, dtype: torch.dtype, sources) -> tuple[float, float]:
    """The largest (rtol, atol) op_db declares for `dtype` in `sources`."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    rtol = atol = 0.0
    for info in getattr(op, "decorators", ()):
        cls_name, test_name = getattr(info, "cls_name", None), getattr(info, "test_name", None)
        if not ((cls_name, test_name) in sources or (cls_name, None) in sources):
            continue
        if getattr(info, "device_type", None) not in (None, "cpu", "cuda"):
            continue
        if info.dtypes is not None and dtype not in info.dtypes or info.active_if is False:
            continue
        for decorator in info.decorators:
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                rtol = max(rtol, decorator.d[dtype].rtol)
                atol = max(atol, decorator.d[dtype].atol)
            elif isinstance(decorator, precisionOverride) and dtype in decorator.d:
                atol = max(atol, float(decorator.d[dtype]))
    return rtol, atol


def tolerances(op, grad: bool = False) -> Callable[[torch.dtype], tuple[float, float]]:
    """(rtol, atol) for a result of a given dtype, for this op."""
    cache: dict[torch.dtype, tuple[float, float]] = {}

    def lookup(dtype: torch.dtype) -> tuple[float, float]:
        if dtype not in cache:
            base = TOLERANCES.get(dtype, (0.0, 0.0))
            if grad and dtype == torch.float32:
                base = GRAD_TOLERANCE
            declared = _declared_tolerance(op, dtype, GRAD_TOLERANCE_SOURCES if grad
                                           else TOLERANCE_SOURCES)
            cache[dtype] = (max(base[0], declared[0]), max(base[1], declared[1]))
        return cache[dtype]

    return lookup


@dataclass
class Outcome:
    index: int  # the sample's position in op.sample_inputs
    status: str
    reason: str = ""
    fallback_ops: list[str] = field(default_factory=list)
    max_diff: float | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in ("", [], None)}
        out["seconds"] = round(self.seconds, 2)
        return out


class SampleTimeout(TimeoutError):
    pass


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raises SampleTimeout in the main thread after `seconds` (None: no
    limit). A sample stuck in C++ is interrupted when it returns to Python."""
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise SampleTimeout(f"sample ran over {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def seed_everything(seed: int = 0) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def generate_samples(op, dtype: torch.dtype, limit: int, requires_grad: bool = False) -> list:
    """The first `limit` samples, the same in every run."""
    seed_everything(0)
    with quiet():
        return list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad),
                                     limit))


def _leaves(value) -> list:
    """Results flattened: tensors and Python values, in order."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value, key=str) for leaf in _leaves(value[key])]
    return [value]


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _on_device(x):
    if _is_tensor(x):
        return _same_layout_on_device(x)
    # A sample that names the CPU as its target (Tensor.to("cpu"), device=)
    # names the device under test in the device run.
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    if isinstance(x, str) and x == "cpu":
        return DEVICE
    return x


def _same_layout_on_device(x: torch.Tensor) -> torch.Tensor:
    """x on the device; a view into a larger storage (a partial view, a
    strided sample) stays one, over a copy of the whole storage, as a sample
    made on the device would be."""
    extent = x.storage_offset() + sum((n - 1) * s for n, s in zip(x.shape, x.stride())) + 1
    storage = x.untyped_storage().nbytes() // max(1, x.element_size())
    if x.numel() == 0 or x.layout != torch.strided or (x.storage_offset() == 0 and x.is_contiguous()
                                                        and extent == storage):
        return x.to(DEVICE)
    whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (storage,), (1,))
    view = whole.to(DEVICE).as_strided(x.shape, x.stride(), x.storage_offset())
    return view.requires_grad_() if x.requires_grad and x.is_leaf else view


def to_device(value):
    return pytree.tree_map(_on_device, value)


def to_cpu(value):
    return pytree.tree_map(lambda t: t.cpu() if _is_tensor(t) else t, value)


def _device_call_args(op, sample) -> tuple[tuple, dict]:
    """The sample's arguments for the device: tensors copied there, and
    device= pointing there for factories (arange, *_like with device=)."""
    host = HOST_ARGUMENTS.get(op.name, ())
    args = tuple(a if i in host else to_device(a)
                 for i, a in enumerate((sample.input, *sample.args)))
    kwargs = to_device(dict(sample.kwargs))
    has_tensor = any(_is_tensor(x) for x in pytree.tree_leaves((sample.input, sample.args,
                                                                sample.kwargs)))
    if "device" in kwargs or not has_tensor:
        kwargs["device"] = DEVICE
    return args, kwargs


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(error).__name__}: {line}"[:300]


def _max_diff(actual: torch.Tensor, expected: torch.Tensor) -> float:
    if expected.numel() == 0:
        return 0.0
    wide = torch.complex128 if expected.is_complex() or actual.is_complex() else torch.float64
    a, e = actual.to(wide), expected.to(wide)
    diff = (a - e).abs()
    both_nan = a.isnan() & e.isnan()
    same_inf = (a == e)  # equal infinities give nan differences
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, math.inf), diff)
    return float(diff.max())


def compare(expected, actual, tol: Callable[[torch.dtype], tuple[float, float]],
            what: str = "output") -> tuple[str, float | None] | None:
    """None when `actual` (on the CPU) matches `expected`, else (reason, max
    abs difference)."""
    flat_e, flat_a = _leaves(expected), _leaves(actual)
    if len(flat_e) != len(flat_a):
        return f"{what}: {len(flat_a)} results, CPU gives {len(flat_e)}", None
    for i, (e, a) in enumerate(zip(flat_e, flat_a)):
        where = f"{what} {i}" if len(flat_e) > 1 else what
        if _is_tensor(e) != _is_tensor(a):
            return f"{where}: {type(a).__name__}, CPU gives {type(e).__name__}", None
        if _is_tensor(e):
            if e.layout != torch.strided or a.layout != torch.strided:
                if e.layout != a.layout:
                    return f"{where}: layout {a.layout}, CPU gives {e.layout}", None
                e, a = e.to_dense(), a.to_dense()
            if a.shape != e.shape:
                return f"{where}: shape {tuple(a.shape)}, CPU gives {tuple(e.shape)}", None
            if a.dtype != e.dtype:
                return (f"{where}: dtype {dtype_name(a.dtype)}, CPU gives "
                        f"{dtype_name(e.dtype)}"), None
            rtol, atol = tol(e.dtype)
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True,
                                           check_stride=False, check_device=False)
            except AssertionError:
                diff = _max_diff(a, e)
                return f"{where}: max abs diff {diff:.3g} (rtol {rtol:g}, atol {atol:g})", diff
        elif isinstance(e, float) and isinstance(a, (float, int)):
            rtol, atol = tol(torch.float32)
            if not (math.isclose(a, e, rel_tol=max(rtol, 1e-7), abs_tol=atol)
                    or (math.isnan(a) and math.isnan(e))):
                return f"{where}: {a!r}, CPU gives {e!r}", abs(a - e)
        else:
            try:
                equal = bool(e == a)
            except Exception:  # noqa: BLE001 - values that cannot say
                equal = repr(e) == repr(a)
            if not equal:
                return f"{where}: {a!r:.60}, CPU gives {e!r:.60}", None
    return None


def _select(x: torch.Tensor, indices: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    """x's elements at `indices` along dim (take_along_dim, for reductions too)."""
    if x.dim() == 0:
        return x.expand(indices.shape) if indices.dim() else x
    if not keepdim:
        indices = indices.unsqueeze(dim)
    picked = torch.take_along_dim(x, indices, dim)
    return picked if keepdim else picked.squeeze(dim)


def compare_outputs(op, sample, expected, actual, tol) -> tuple[str, float | None] | None:
    """compare(), except that where PyTorch leaves the order of equal
    elements open (selection.TIES_UNSPECIFIED) the device's indices must
    select the same values as CPU's, not be the same indices."""
    rule = ties_unspecified(op, sample)
    x = sample.input
    flat_e, flat_a = _leaves(expected), _leaves(actual)
    # (values, indices), or argsort's indices alone
    if rule is None or not _is_tensor(x) or len(flat_e) not in (1, 2) \
            or len(flat_a) != len(flat_e) or not all(map(_is_tensor, flat_e + flat_a)):
        return compare(expected, actual, tol)
    dim, keepdim, any_order = rule
    e_idx, a_idx = flat_e[-1], flat_a[-1]
    e_val, a_val = (flat_e[0], flat_a[0]) if len(flat_e) == 2 else (None, None)
    if a_idx.shape != e_idx.shape or a_idx.dtype != e_idx.dtype:
        return compare(expected, actual, tol)
    if e_val is not None:
        if any_order and e_val.dim():
            e_val, a_val = e_val.sort(dim).values, a_val.sort(dim).values
        mismatch = compare(e_val, a_val, tol, what="values")
        if mismatch:
            return mismatch
    if e_idx.numel() == 0:
        return None
    full_sort = not any_order and keepdim and x.dim() > 0 and e_idx.shape == x.shape
    if full_sort and not torch.equal(a_idx.sort(dim).values, e_idx.sort(dim).values):
        return "indices: not a permutation", None
    try:
        picked = _select(x, a_idx, dim, keepdim)
    except (IndexError, RuntimeError) as error:
        return f"indices: {_first_line(error)}", None
    return compare(_select(x, e_idx, dim, keepdim), picked, tol, what="values at indices")


def _result_devices(value) -> str | None:
    """Why a result is not on the device, if one is not."""
    for leaf in _leaves(value):
        if _is_tensor(leaf) and leaf.device.type != DEVICE:
            return f"result on {leaf.device.type}, not {DEVICE}"
    return None


def _synchronize() -> None:
    getattr(torch, DEVICE).synchronize()


def _fallbacks() -> dict[str, int]:
    return dict(torch_pjrt.metrics()["fallback_ops"])


def _diff_counts(after: dict[str, int], before: dict[str, int]) -> list[str]:
    return sorted(k for k, v in after.items() if v > before.get(k, 0))


def _errors(cpu_error: BaseException, device_error: BaseException | None) -> tuple[str, str]:
    if device_error is None:
        return "error-type", f"{DEVICE} raised nothing; CPU: {_first_line(cpu_error)}"
    # The same type, not a subclass: NotImplementedError is a RuntimeError.
    if type(device_error) is type(cpu_error):
        return "cpu-error-ok", _first_line(cpu_error)
    return "error-type", f"{DEVICE}: {_first_line(device_error)}; CPU: {_first_line(cpu_error)}"


def forward_sample(op, sample, index: int, tol, timeout: float | None = None) -> Outcome:
    """Runs one sample on the CPU and on the device and classifies it."""
    start = time.perf_counter()
    skip = sample_skip_reason(op, sample)
    if skip:
        return Outcome(index, "skip", skip)
    # The device's copy is made first: the CPU call may mutate the sample.
    try:
        device_args, device_kwargs = _device_call_args(op, sample)
        _synchronize()
    except Exception as error:  # noqa: BLE001
        return Outcome(index, "error", "copying the sample to the device: " + _first_line(error),
                       seconds=time.perf_counter() - start)
    cpu_args = (sample.input, *sample.args)
    cpu_error: BaseException | None = None
    expected = None
    try:
        with quiet():
            expected = sample.output_process_fn_grad(op(*cpu_args, **sample.kwargs))
    except Exception as error:  # noqa: BLE001
        cpu_error = error

    device_error: BaseException | None = None
    actual = device_inputs = None
    misplaced = None
    torch_pjrt.reset_metrics()
    try:
        with quiet(), time_limit(timeout):
            raw = op(*device_args, **device_kwargs)
            misplaced = _result_devices(raw)
            # Reading the results to the host raises deferred device checks.
            actual = sample.output_process_fn_grad(to_cpu(raw))
            device_inputs = to_cpu(device_args)
            _synchronize()
    except Exception as error:  # noqa: BLE001
        device_error = error
    fallback_ops = sorted(_fallbacks())
    seconds = time.perf_counter() - start

    def outcome(status: str, reason: str = "", max_diff: float | None = None) -> Outcome:
        return Outcome(index, status, reason, fallback_ops, max_diff, seconds)

    if cpu_error is not None:
        return outcome(*_errors(cpu_error, device_error))
    if device_error is not None:
        return outcome("error", _first_line(device_error))
    if misplaced:
        return outcome("wrong", misplaced)
    mismatch = compare_outputs(op, sample, expected, actual, tol)
    if mismatch is None:  # ops that write into their inputs: those too
        mismatch = compare([t for t in _leaves(cpu_args) if _is_tensor(t)],
                           [t for t in _leaves(device_inputs) if _is_tensor(t)], tol,
                           what="mutated input")
    if mismatch is not None:
        return outcome("wrong", *mismatch)
    if fallback_ops:
        return outcome("fallback", "fell back: " + ", ".join(fallback_ops))
    return outcome("ok")


def _grad_leaves(sample) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
            if _is_tensor(t) and t.requires_grad]


def _differentiable(outputs) -> list[torch.Tensor]:
    return [t for t in _leaves(outputs) if _is_tensor(t) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


def _cotangents(outputs: list[torch.Tensor], index: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + index)
    return [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]


def _weighted_sum(outputs, cotangents):
    return sum(((o * w).sum().real if o.is_complex() else (o * w).sum())
               for o, w in zip(outputs, cotangents))


def backward_sample(op, sample, index: int, tol, timeout: float | None = None) -> Outcome | None:
    """Gradients of a random weighting of the outputs with respect to every
    input requiring grad, CPU against the device. None when the sample has
    nothing to differentiate."""
    start = time.perf_counter()
    leaves = _grad_leaves(sample)
    if not leaves:
        return None
    skip = sample_skip_reason(op, sample)
    if skip:
        return Outcome(index, "skip", skip)
    cpu_error: BaseException | None = None
    cpu_grads = cotangents = None
    try:
        with quiet():
            out = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
            outs = _differentiable(out)
            if not outs:
                return None
            cotangents = _cotangents(outs, index)
            cpu_grads = torch.autograd.grad(_weighted_sum(outs, cotangents), leaves,
                                            allow_unused=True)
    except Exception as error:  # noqa: BLE001
        cpu_error = error

    device_error: BaseException | None = None
    device_grads = None
    forward_fallbacks: dict[str, int] = {}
    torch_pjrt.reset_metrics()
    try:
        with quiet(), time_limit(timeout):
            device_leaves = {id(t): _same_layout_on_device(t.detach()).requires_grad_(True)
                             for t in leaves}

            def move(t):
                return device_leaves.get(id(t), t.to(DEVICE)) if _is_tensor(t) else _on_device(t)

            host = HOST_ARGUMENTS.get(op.name, ())
            args = tuple(a if i in host else pytree.tree_map(move, a)
                         for i, a in enumerate((sample.input, *sample.args)))
            kwargs = pytree.tree_map(move, dict(sample.kwargs))
            if "device" in kwargs:
                kwargs["device"] = DEVICE
            out = sample.output_process_fn_grad(op(*args, **kwargs))
            outs = _differentiable(out)
            _synchronize()
            forward_fallbacks = _fallbacks()
            if cotangents is None or len(outs) != len(cotangents):
                raise RuntimeError(f"{len(outs)} differentiable results on {DEVICE}")
            grads = torch.autograd.grad(
                _weighted_sum(outs, [w.to(DEVICE) for w in cotangents]),
                list(device_leaves.values()), allow_unused=True)
            device_grads = [None if g is None else g.cpu() for g in grads]
            _synchronize()
    except Exception as error:  # noqa: BLE001
        device_error = error
    fallback_ops = _diff_counts(_fallbacks(), forward_fallbacks)
    seconds = time.perf_counter() - start

    def outcome(status: str, reason: str = "", max_diff: float | None = None) -> Outcome:
        return Outcome(index, status, reason, fallback_ops, max_diff, seconds)

    if cpu_error is not None:
        return outcome(*_errors(cpu_error, device_error))
    if device_error is not None:
        return outcome("error", _first_line(device_error))
    assert cpu_grads is not None and device_grads is not None
    for i, (c, d) in enumerate(zip(cpu_grads, device_grads)):
        if c is None and d is not None and bool(d.any()):
            return outcome("wrong", f"grad {i}: nonzero, CPU gives none")
        if c is not None and d is None:
            c_zero = not bool(c.any())
            if not c_zero:
                return outcome("wrong", f"grad {i}: none, CPU gives one")
            continue
        if c is not None:
            mismatch = compare(c, d, tol, what=f"grad {i}")
            if mismatch is not None:
                return outcome("wrong", *mismatch)
    if fallback_ops:
        return outcome("fallback", "backward fell back: " + ", ".join(fallback_ops))
    return outcome("ok")


def iter_forward(op, dtype: torch.dtype, limit: int = SAMPLES, start: int = 0,
                 timeout: float | None = None,
                 on_start: Callable[[int], None] | None = None) -> Iterator[Outcome]:
    """The op's samples in `dtype` from index `start` on, classified one by
    one (on_start(index) before each)."""
    reason = op_skip_reason(op)
    try:
        samples = generate_samples(op, dtype, limit)
    except Exception as error:  # noqa: BLE001
        yield Outcome(-1, "skip", "sample_inputs raised " + _first_line(error))
        return
    tol = tolerances(op)
    for i, sample in enumerate(samples):
        if i < start:
            continue
        if on_start:
            on_start(i)
        yield Outcome(i, "skip", reason) if reason else forward_sample(op, sample, i, tol, timeout)


def iter_backward(op, limit: int = BACKWARD_SAMPLES, start: int = 0, found: int = 0,
                  timeout: float | None = None,
                  on_start: Callable[[int], None] | None = None) -> Iterator[Outcome]:
    """Float32 gradients of the op's first `limit` differentiable samples
    (`found` of them already done before index `start`)."""
    reason = op_skip_reason(op)
    try:
        samples = generate_samples(op, torch.float32, BACKWARD_SCAN, requires_grad=True)
    except Exception as error:  # noqa: BLE001
        yield Outcome(-1, "skip", "sample_inputs raised " + _first_line(error))
        return
    tol = tolerances(op, grad=True)
    for i, sample in enumerate(samples):
        if found >= limit:
            break
        if i < start or not _grad_leaves(sample):
            continue
        if on_start:
            on_start(i)
        result = Outcome(i, "skip", reason) if reason else backward_sample(op, sample, i, tol,
                                                                           timeout)
        if result is not None:
            found += 1
            yield result


def run_forward(op, dtype: torch.dtype, limit: int = SAMPLES,
                timeout: float | None = None) -> list[Outcome]:
    return list(iter_forward(op, dtype, limit, timeout=timeout))


def run_backward(op, limit: int = BACKWARD_SAMPLES, timeout: float | None = None) -> list[Outcome]:
    return list(iter_backward(op, limit, timeout=timeout))
