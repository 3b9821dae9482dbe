"""torch's fused SGD and Adagrad kernels (`fused=True`: aten::_fused_sgd_,
aten::_fused_adagrad_), which torch implements only for CPU, CUDA and MPS,
run on the device: compared with torch's CPU kernels step by step,
including the AMP path (grad_scale unscales the gradients and writes them
back; a step with found_inf set leaves everything untouched) and a tensor
lr. Training through torch.optim with fused=True is in test_training.py."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name
SHAPES = [(5, 3), (7,), (2, 2, 2)]


def _tensors(device, seed):
    return [torch.randn(s, generator=torch.Generator().manual_seed(seed + i)).to(device)
            for i, s in enumerate(SHAPES)]


def _run(step_fn, make_state, steps: int, grad_scale: bool):
    g = torch.Generator().manual_seed(9)
    states = {"cpu": make_state("cpu"), NAME: make_state(NAME)}
    for step in range(steps):
        grads = [torch.randn(s, generator=g) for s in SHAPES]
        found = 1.0 if (grad_scale and step == 2) else 0.0
        for device, st in states.items():
            gs = [x.to(device) * (512.0 if grad_scale else 1.0) for x in grads]
            extra = {}
            if grad_scale:
                extra = dict(grad_scale=torch.tensor(512.0, device=device),
                             found_inf=torch.tensor(found, device=device))
            step_fn(st, gs, step, device, extra)
            st.setdefault("grads", []).append(gs)
    return states["cpu"], states[NAME]


def _compare(cpu, dev, keys):
    for key in keys:
        for a, b in zip(dev[key], cpu[key]):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6, msg=key)
    for gd, gc in zip(dev["grads"], cpu["grads"]):
        for a, b in zip(gd, gc):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6)


SGD_CASES = {
    "momentum_nesterov_decay": dict(momentum=0.9, nesterov=True, weight_decay=0.01),
    "momentum_dampening_maximize": dict(momentum=0.5, dampening=0.2, maximize=True),
    "no_momentum": dict(momentum=0.0),
    "amp": dict(momentum=0.9, grad_scale=True),
    "tensor_lr": dict(momentum=0.9, lr_tensor=True),
}


@pytest.mark.parametrize("case", sorted(SGD_CASES))
def test_fused_sgd_matches_the_cpu_kernel(case):
    options = dict(SGD_CASES[case])
    grad_scale = options.pop("grad_scale", False)
    lr_tensor = options.pop("lr_tensor", False)
    momentum = options.get("momentum", 0.0)

    def make_state(device):
        return dict(params=_tensors(device, 0), bufs=[torch.zeros(s, device=device) for s in SHAPES])

    def step_fn(st, grads, step, device, extra):
        lr = torch.tensor(0.05, device=device) if lr_tensor else 0.05
        torch.ops.aten._fused_sgd_(
            st["params"], grads, st["bufs"] if momentum else [],
            weight_decay=options.get("weight_decay", 0.0), momentum=momentum, lr=lr,
            dampening=options.get("dampening", 0.0), nesterov=options.get("nesterov", False),
            maximize=options.get("maximize", False), is_first_step=step == 0, **extra)

    torch_pjrt.reset_metrics()
    cpu, dev = _run(step_fn, make_state, 4, grad_scale)
    _compare(cpu, dev, ["params", "bufs"])
    assert torch_pjrt.metrics()["fallback_ops"] == {}


ADAGRAD_CASES = {
    "plain": {},
    "decay_maximize": dict(lr_decay=0.05, weight_decay=0.1, maximize=True),
    "amp": dict(grad_scale=True),
    "tensor_lr": dict(lr_tensor=True),
}


@pytest.mark.parametrize("case", sorted(ADAGRAD_CASES))
def test_fused_adagrad_matches_the_cpu_kernel(case):
    options = dict(ADAGRAD_CASES[case])
    grad_scale = options.pop("grad_scale", False)
    lr_tensor = options.pop("lr_tensor", False)

    def make_state(device):
        return dict(params=_tensors(device, 0), sums=[torch.full(s, 0.1, device=device) for s in SHAPES],
                    steps=[torch.zeros((), device=device) for _ in SHAPES])

    def step_fn(st, grads, step, device, extra):
        for t in st["steps"]:
            t.add_(1)  # as torch.optim.Adagrad does before the kernel
        lr = torch.tensor(0.1, device=device) if lr_tensor else 0.1
        torch.ops.aten._fused_adagrad_(
            st["params"], grads, st["sums"], st["steps"], lr=lr,
            lr_decay=options.get("lr_decay", 0.0), weight_decay=options.get("weight_decay", 0.0),
            eps=1e-10, maximize=options.get("maximize", False), **extra)

    torch_pjrt.reset_metrics()
    cpu, dev = _run(step_fn, make_state, 4, grad_scale)
    _compare(cpu, dev, ["params", "sums"])
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_fused_kernels_reject_mismatched_lists():
    p = [torch.zeros(3, device=NAME)]
    with pytest.raises(RuntimeError, match=r"_fused_sgd_.*momentum_buffer_list has 0 tensors"):
        torch.ops.aten._fused_sgd_(p, [torch.zeros(3, device=NAME)], [], weight_decay=0.0,
                                   momentum=0.9, lr=0.1, dampening=0.0, nesterov=False,
                                   maximize=False, is_first_step=True)
    with pytest.raises(RuntimeError, match=r"_fused_adagrad_.*state_sums\[0\].*\(4,\)"):
        torch.ops.aten._fused_adagrad_(p, [torch.zeros(3, device=NAME)], [torch.zeros(4, device=NAME)],
                                       [torch.ones((), device=NAME)], lr=0.1, lr_decay=0.0,
                                       weight_decay=0.0, eps=1e-10, maximize=False)
