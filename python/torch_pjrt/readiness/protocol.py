"""The workload protocol: what a readiness run needs to know about a workload.

A workload file is a Python file that defines `workload()` returning a
`Workload` (or a module-level `WORKLOAD`). The tool builds it once per device
and mode, feeds it the same data slice on each, and compares what comes back:

    import torch
    from torch_pjrt.readiness import Size, Target, Workload

    def build(target: Target):
        model = MyModel().to(target.device)          # seeded by the tool
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def train_step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return target.compile(train_step)            # compiled only in the compiled mode

    def data(size: Size):                            # the representative slice, on the CPU
        g = torch.Generator().manual_seed(0)
        return [(torch.randn(size.batch, size.length, generator=g),
                 torch.randint(0, 10, (size.batch,), generator=g)) for _ in range(20)]

    def workload():
        return Workload(name="my-model", kind="train", build=build, data=data,
                        sizes=[Size(8, 64)], target=1.5)

`build(target)` returns the step: a callable taking one batch (the tensors of
one element of `data(size)`, already moved to the device, unpacked if the
element is a tuple) and returning the step's result: the loss for training,
the outputs for inference. It is called once per device and mode; the same
step then runs every size. `Size.length` is whatever the workload's second
dimension is (sequence length, image side).
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.utils._pytree as pytree

KINDS = ("train", "infer")


@dataclass(frozen=True, order=True)
class Size:
    """One input size: batch and length (sequence length, image side, ...)."""

    batch: int
    length: int

    @classmethod
    def parse(cls, text: str) -> "Size":
        match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
        if not match or int(match.group(1)) <= 0 or int(match.group(2)) <= 0:
            raise ValueError(f"a size is BATCHxLENGTH with positive numbers, like 8x128; got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.batch}x{self.length}"


@dataclass
class Target:
    """Where and how a workload is built: the device, and the compiler
    (a torch.compile backend) in the compiled mode, None in eager modes."""

    device: torch.device
    mode: str
    backend: Optional[Any] = None

    @property
    def compiled(self) -> bool:
        return self.backend is not None

    def compile(self, fn: Callable, **kwargs: Any) -> Callable:
        """`torch.compile(fn, backend=...)` in the compiled mode, `fn` otherwise."""
        if self.backend is None:
            return fn
        return torch.compile(fn, backend=self.backend, **kwargs)

    def synchronize(self) -> None:
        if self.device.type == "cpu":
            return
        getattr(torch, self.device.type).synchronize()


def _default_metric(kind: str) -> Callable[[list], float]:
    if kind == "train":
        return lambda results: final_loss(results)

    def mean_output(results: list) -> float:
        values = [t.double().mean().item() for r in results for t in pytree.tree_leaves(r)
                  if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return sum(values) / len(values) if values else float("nan")
    return mean_output


def final_loss(results: list, window: int = 3) -> float:
    """The mean of the last `window` losses: the training metric by default."""
    losses = [float(r) for r in results]
    tail = losses[-window:]
    return sum(tail) / len(tail) if tail else float("nan")


def rows_close(got: Any, expected: Any, rtol: float, atol: float) -> list[bool]:
    """Per sample (first dimension), whether every output matches."""
    g, e = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    rows: Optional[list[bool]] = None
    for a, b in zip(g, e):
        if not isinstance(b, torch.Tensor):
            continue
        a = torch.as_tensor(a)
        if a.shape != b.shape:
            n = b.shape[0] if b.dim() else 1
            return [False] * n
        if b.dim() == 0:
            ok = [_close(a, b, rtol, atol)]
        else:
            ok = [_close(a[i], b[i], rtol, atol) for i in range(b.shape[0])]
        rows = ok if rows is None else [x and y for x, y in zip(rows, ok)]
    return rows or []


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    return torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True)


@dataclass
class Workload:
    """A workload as the readiness tool runs it; see the module docstring."""

    name: str
    kind: str  # "train" or "infer"
    build: Callable[[Target], Callable[..., Any]]
    data: Callable[[Size], Sequence[Any]]
    description: str = ""
    sizes: list = field(default_factory=lambda: [Size(8, 64)])
    # Results of each step on the slice (on the CPU) -> the task metric.
    metric: Optional[Callable[[list], float]] = None
    metric_name: str = ""
    # Training: the metric value to reach (the cost-to-target figure), with
    # the metric's direction; a smoothed loss by default (final_loss).
    target: Optional[float] = None
    higher_is_better: bool = False
    # Step results compared with the reference's: assert_close-style.
    rtol: float = 1e-4
    atol: float = 1e-5
    # The task metric compared with the reference's, absolute.
    metric_tolerance: float = 1e-3
    # Inference: (result, reference result) -> one bool per task in the batch.
    sample_ok: Optional[Callable[[Any, Any], list]] = None
    # Tasks per step for throughput and cost (default: the batch); tokens
    # per step default to batch x length.
    tasks_per_step: Optional[Callable[[Size], int]] = None
    tokens_per_step: Optional[Callable[[Size], int]] = None
    # Modes that cannot run this workload, with why ({"compiled": "..."}).
    unsupported: dict = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"workload {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.sizes:
            raise ValueError(f"workload {self.name!r}: needs at least one size")
        self.sizes = [s if isinstance(s, Size) else Size.parse(str(s)) for s in self.sizes]
        if self.metric is None:
            self.metric = _default_metric(self.kind)
            self.metric_name = self.metric_name or ("final loss (mean of the last 3 steps)"
                                                    if self.kind == "train" else "mean output")
        self.metric_name = self.metric_name or "metric"
        if self.sample_ok is None:
            rtol, atol = self.rtol, self.atol
            self.sample_ok = lambda got, expected: rows_close(got, expected, rtol, atol)

    def tasks(self, size: Size) -> int:
        return self.tasks_per_step(size) if self.tasks_per_step else size.batch

    def tokens(self, size: Size) -> int:
        return self.tokens_per_step(size) if self.tokens_per_step else size.batch * size.length

    def reached(self, value: float) -> bool:
        """Whether a metric value meets the target."""
        if self.target is None or value is None or math.isnan(value):
            return False
        return value >= self.target if self.higher_is_better else value <= self.target


def load_file(path: str) -> Workload:
    """The workload a Python file defines (`workload()` or `WORKLOAD`)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"workload file {path!r} does not exist")
    name = f"_readiness_workload_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if hasattr(module, "workload"):
        workload = module.workload()
    elif hasattr(module, "WORKLOAD"):
        workload = module.WORKLOAD
    else:
        raise ValueError(f"{path}: a workload file defines workload() returning a "
                         "torch_pjrt.readiness.Workload, or WORKLOAD")
    if not isinstance(workload, Workload):
        raise TypeError(f"{path}: workload() returned {type(workload).__name__}, "
                        "not a torch_pjrt.readiness.Workload")
    workload.source = workload.source or str(file)
    return workload


def load(spec: dict) -> Workload:
    """A workload from what the command line named: {"example": name},
    {"file": path} or {"hf": path, "task": task}."""
    if "example" in spec:
        from .examples import example

        return example(spec["example"])
    if "file" in spec:
        return load_file(spec["file"])
    if "hf" in spec:
        from .hf_workload import hf_workload

        return hf_workload(spec["hf"], spec.get("task", "text-generation"))
    raise ValueError(f"no workload in {spec}")


def to_device(batch: Any, device: torch.device) -> Any:
    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, batch)


def call_step(step: Callable, batch: Any) -> Any:
    if isinstance(batch, tuple):
        return step(*batch)
    if isinstance(batch, dict):
        return step(**batch)
    return step(batch)


def to_host(result: Any) -> Any:
    return pytree.tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, result)
