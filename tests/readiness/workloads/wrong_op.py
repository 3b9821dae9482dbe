"""A custom op whose tpu kernel is deliberately wrong (x * 2.01 where the CPU
computes x * 2): the report must fail this workload."""

import torch

from torch_pjrt.readiness import Size, Workload

_lib = torch.library.Library("readiness_test", "DEF")
_lib.define("scale(Tensor x) -> Tensor")
_lib.impl("scale", lambda x: x * 2, "CPU")
_lib.impl("scale", lambda x: x * 2.01, "PrivateUse1")


def build(target):
    weight = torch.randn(8, 8).to(target.device)

    def step(x):
        return torch.ops.readiness_test.scale(x @ weight)
    return step


def data(size):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size.batch, 8, generator=g),) for _ in range(3)]


def workload():
    return Workload(name="wrong-op", kind="infer", build=build, data=data, sizes=[Size(4, 8)])
