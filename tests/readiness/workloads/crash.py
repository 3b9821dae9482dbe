"""The step aborts the process on the target device (as a native crash
would): that part is reported as crashed, the rest of the report stands."""

import os

import torch

from torch_pjrt.readiness import Size, Workload


def build(target):
    def step(x):
        if target.device.type != "cpu":
            os.abort()
        return x * 3
    return step


def data(size):
    return [(torch.ones(size.batch, size.length),) for _ in range(2)]


def workload():
    return Workload(name="crash", kind="infer", build=build, data=data, sizes=[Size(1, 4)])
