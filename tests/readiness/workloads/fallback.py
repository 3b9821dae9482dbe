"""Training through torch.linalg.eigvals of a general matrix, whose
eigendecomposition has no tpu lowering and runs on the CPU: the census must name it, with the time it costs, and the
host sync of the divergence check, with its line (18)."""

import torch

from torch_pjrt.readiness import Size, Workload


def build(target):
    model = torch.nn.Linear(16, 16).to(target.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        h = model(x)
        loss = torch.linalg.eigvals(h.T @ h + torch.eye(16, device=h.device)).abs().mean()
        if loss.item() > 1e6:  # a host sync the census must trace to this line
            raise FloatingPointError("the loss diverged")
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def data(size):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size.batch, 16, generator=g),) for _ in range(4)]


def workload():
    return Workload(name="eig-fallback", kind="train", build=build, data=data,
                    sizes=[Size(4, 8)], target=10.0)
