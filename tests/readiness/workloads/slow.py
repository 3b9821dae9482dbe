"""Each step sleeps: a run that cannot finish inside a short budget, or that
a test interrupts while it runs."""

import time

import torch

from torch_pjrt.readiness import Size, Workload


def build(target):
    def step(x):
        time.sleep(0.4)
        return x + 1
    return step


def data(size):
    return [(torch.full((size.batch, size.length), float(i)),) for i in range(200)]


def workload():
    return Workload(name="slow", kind="infer", build=build, data=data, sizes=[Size(1, 4)])
