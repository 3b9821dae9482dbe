"""Device kernels for torch's fused optimizers (`fused=True`): Adam, AdamW,
SGD and Adagrad.

`torch.optim.Adam(..., fused=True)` and AdamW call `aten::_fused_adam_` and
`aten::_fused_adamw_`, SGD `aten::_fused_sgd_` and Adagrad
`aten::_fused_adagrad_`, which torch implements only for CPU, CUDA and MPS;
the Hugging Face Trainer's default optimizer (`adamw_torch_fused`) uses
the first. Without these kernels every step would fall back to the CPU. Here the
update is written with ordinary device ops, which the lowering table runs
natively: everything stays on the device, the step count and learning rate
are device values, and nothing waits for the host.

SGD and Adagrad follow torch's CPU kernels: the gradient unscaled by
`grad_scale` (and written back), negated under `maximize`, the weight decay
added to it; SGD's momentum buffer set to the gradient on the first step,
else `momentum * buf + (1 - dampening) * grad`, Nesterov adding `momentum *
buf` to the gradient; Adagrad's sum of squares, its lr decayed by the
(already incremented) step count.

Adam's arithmetic follows torch's fused kernels: the gradient is divided by
`grad_scale` (and written back, as the CPU kernel does), negated under
`maximize`; AdamW decays the parameter, Adam adds the decay to the
gradient; the moments update with `lerp`/`addcmul`; the step uses the
bias corrections of the (already incremented) step count. Where `found_inf`
is nonzero the tensors keep their old values, as torch's kernels skip the
update.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

_LIB: Optional[torch.library.Library] = None


def _adam_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    max_exp_avg_sqs: Sequence[torch.Tensor],
    state_steps: Sequence[torch.Tensor],
    lr: Union[float, torch.Tensor],
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Optional[torch.Tensor],
    found_inf: Optional[torch.Tensor],
    decoupled: bool,
) -> None:
    op = "_fused_adamw_" if decoupled else "_fused_adam_"
    lists = {"grads": grads, "exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs,
             "state_steps": state_steps}
    if amsgrad:
        lists["max_exp_avg_sqs"] = max_exp_avg_sqs
    elif len(max_exp_avg_sqs) != 0:
        raise RuntimeError(f"aten::{op}: max_exp_avg_sqs must be empty when amsgrad=False, "
                           f"got {len(max_exp_avg_sqs)} tensors")
    _check_lists(op, params, lists)
    if not params:
        return
    # The step's shared values, on the parameters' device once.
    device = params[0].device
    keep, scale, lr_value = _shared(params, lr, grad_scale, found_inf)
    for i in range(len(params)):
        param, grad, exp_avg, exp_avg_sq = params[i], grads[i], exp_avgs[i], exp_avg_sqs[i]
        step = state_steps[i].to(device=device, dtype=torch.float32)
        grad = _unscaled(grad, scale, keep)
        if maximize:
            grad = -grad
        new_param = param
        if weight_decay != 0:
            if decoupled:
                new_param = param * (1 - lr_value * weight_decay)
            else:
                grad = grad + param * weight_decay
        new_avg = exp_avg.lerp(grad, 1 - beta1)
        new_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
        bias_correction1 = 1 - torch.pow(beta1, step)
        bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
        second = new_sq
        new_max = None
        if amsgrad:
            new_max = torch.maximum(max_exp_avg_sqs[i], new_sq)
            second = new_max
        denom = second.sqrt() / bias_correction2_sqrt + eps
        new_param = new_param - (lr_value / bias_correction1) * new_avg / denom
        updates = [(param, new_param), (exp_avg, new_avg), (exp_avg_sq, new_sq)]
        if new_max is not None:
            updates.append((max_exp_avg_sqs[i], new_max))
        _commit(updates, keep)


def _check_lists(op: str, params, lists: dict) -> None:
    n = len(params)
    for name, values in lists.items():
        if len(values) != n:
            raise RuntimeError(
                f"aten::{op}: {name} has {len(values)} tensors but there are {n} parameters")
    for i, p in enumerate(params):
        if p.device != params[0].device:
            raise RuntimeError(f"aten::{op}: parameter {i} is on {p.device} but parameter 0 is "
                               f"on {params[0].device}; one fused step takes one device")
        for name, values in lists.items():
            t = values[i]
            if name != "state_steps" and (t.shape != p.shape or t.device != p.device):
                raise RuntimeError(
                    f"aten::{op}: {name}[{i}] has shape {tuple(t.shape)} on {t.device} but "
                    f"parameter {i} has shape {tuple(p.shape)} on {p.device}")


def _unscaled(grad: torch.Tensor, scale, keep) -> torch.Tensor:
    """grad / grad_scale, written back into grad unless the step is skipped."""
    if scale is None:
        return grad
    unscaled = grad / scale
    grad.copy_(unscaled if keep is None else torch.where(keep, grad, unscaled))
    return unscaled


def _commit(updates, keep) -> None:
    for target, value in updates:
        if keep is not None:
            value = torch.where(keep, target, value)
        target.copy_(value)


def _shared(params, lr, grad_scale, found_inf):
    device = params[0].device
    keep = None if found_inf is None else found_inf.to(device).reshape(()) != 0
    scale = None if grad_scale is None else grad_scale.to(device).reshape(())
    lr_value = lr.to(device).reshape(()) if isinstance(lr, torch.Tensor) else lr
    return keep, scale, lr_value


def _step_grad(grad, param, scale, keep, maximize: bool, weight_decay: float):
    """SGD's and Adagrad's gradient: unscaled, negated under maximize, with
    the (coupled) weight decay added."""
    grad = _unscaled(grad, scale, keep)
    if maximize:
        grad = -grad
    return grad + param * weight_decay if weight_decay != 0 else grad


def _sgd_kernel(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
                nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    lists = {"grads": grads}
    if momentum != 0:
        lists["momentum_buffer_list"] = momentum_buffer_list
    _check_lists("_fused_sgd_", params, lists)
    if not params:
        return
    with torch.no_grad():
        keep, scale, lr_value = _shared(params, lr, grad_scale, found_inf)
        for i, param in enumerate(params):
            grad = _step_grad(grads[i], param, scale, keep, maximize, weight_decay)
            updates = []
            if momentum != 0:
                buf = momentum_buffer_list[i]
                new_buf = grad if is_first_step else buf * momentum + grad * (1 - dampening)
                updates.append((buf, new_buf))
                grad = grad + new_buf * momentum if nesterov else new_buf
            updates.insert(0, (param, param - grad * lr_value))
            _commit(updates, keep)


def _adagrad_kernel(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
                    maximize, grad_scale=None, found_inf=None):
    _check_lists("_fused_adagrad_", params,
                 {"grads": grads, "state_sums": state_sums, "state_steps": state_steps})
    if not params:
        return
    with torch.no_grad():
        keep, scale, lr_value = _shared(params, lr, grad_scale, found_inf)
        for i, param in enumerate(params):
            grad = _step_grad(grads[i], param, scale, keep, maximize, weight_decay)
            step = state_steps[i].to(device=param.device, dtype=torch.float32)
            clr = lr_value / (1 + (step - 1) * lr_decay)
            new_sum = state_sums[i] + grad * grad
            new_param = param - clr * grad / (new_sum.sqrt() + eps)
            _commit([(param, new_param), (state_sums[i], new_sum)], keep)


def _make_kernel(decoupled: bool):
    def kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
               beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
               found_inf=None):
        with torch.no_grad():
            _adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
                       beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
                       found_inf, decoupled)

    return kernel


def register(dispatch_key: str = "PrivateUse1") -> None:
    """Registers the kernels once for the device's dispatch key."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name, decoupled in (("_fused_adam_", False), ("_fused_adamw_", True)):
        kernel = _make_kernel(decoupled)
        lib.impl(name, kernel, dispatch_key)
        lib.impl(f"{name}.tensor_lr", kernel, dispatch_key)
    for name, kernel in (("_fused_sgd_", _sgd_kernel), ("_fused_adagrad_", _adagrad_kernel)):
        lib.impl(name, kernel, dispatch_key)
        lib.impl(f"{name}.tensor_lr", kernel, dispatch_key)
    _LIB = lib
