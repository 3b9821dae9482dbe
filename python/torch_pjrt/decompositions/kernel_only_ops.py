"""Ops torch implements only as per-backend kernels (CPU and CUDA) with no
decomposition, written here in aten ops so that tpu runs them on the device
instead of sending them to the CPU fallback. Eager mode runs them through
the decomposition kernel (see __init__.py); compiled graphs decompose them
the same way (_compile/composite_ops.py).

- `_weight_norm_interface_backward`: the backward of
  `nn.utils.parametrizations.weight_norm` (wav2vec2's positional
  convolution, HiFi-GAN and other vocoders). With w = g * v / ||v||, the
  norm taken over every dim but `dim`: grad_g = sum(grad_w * v) / ||v|| and
  grad_v = g / ||v|| * (grad_w - v * grad_g / ||v||), in float32 for half
  types as the CPU kernel accumulates.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim: int):
    rank = saved_v.dim()
    torch._check(dim in (0, rank - 1, -1),
                 lambda: "fused kernels can only be computed for first or last dim")
    dim = dim % rank
    compute = torch.float32 if saved_v.dtype in (torch.float16, torch.bfloat16) else saved_v.dtype
    grad_w, v = grad_w.to(compute), saved_v.to(compute)
    g, norms = saved_g.to(compute), saved_norms.to(compute)
    others = [d for d in range(rank) if d != dim]
    grad_g = (grad_w * v).sum(others, keepdim=True) / norms
    grad_v = (g / norms) * (grad_w - v * (grad_g / norms))
    return grad_v.to(saved_v.dtype), grad_g.reshape(saved_g.shape).to(saved_g.dtype)


DECOMPOSITIONS = {
    _aten._weight_norm_interface_backward.default: weight_norm_interface_backward,
}
