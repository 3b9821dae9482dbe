"""Inference of sin(x) * 2: two ops, so every new input size compiles exactly
two programs in strict eager (the shape-sweep test counts them)."""

import torch

from torch_pjrt.readiness import Size, Workload


def build(target):
    def step(x):
        return torch.sin(x) * 2
    return target.compile(step)


def data(size):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size.batch, size.length, generator=g),) for _ in range(3)]


def workload():
    return Workload(name="sine", kind="infer", build=build, data=data, sizes=[Size(2, 8)])
