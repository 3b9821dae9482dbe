"""RMSNorm as a kernel, with Transformers' semantics: normalise in float32,
cast back to the input's dtype, then scale by the weight (so a float32
weight on bfloat16 activations gives float32, as in Llama's RMSNorm).

Two implementations of the forward:
  - "xla": plain JAX, which XLA fuses into the surrounding program;
  - "pallas": a Pallas kernel over blocks of rows: compiled by Mosaic on
    TPU, run in interpret mode elsewhere (so it is testable on any
    machine, slowly).
Both share one backward, written in JAX (a jax.custom_vjp rule).
`RMSNorm` is the layer Hugging Face Kernels can swap into a model
(torch_pjrt.kernels.hub).
"""
from __future__ import annotations

import functools

import torch

__all__ = ["rms_norm", "RMSNorm"]


def _pallas_rms(x2d, w, eps: float, interpret: bool):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    rows, hidden = x2d.shape
    block = 8 if rows % 8 == 0 else (1 if rows < 8 else next(b for b in (4, 2, 1) if rows % b == 0))

    def kernel(x_ref, w_ref, o_ref):
        x = x_ref[...].astype(jnp.float32)
        var = jnp.mean(x * x, axis=-1, keepdims=True)
        normed = (x * jax.lax.rsqrt(var + eps)).astype(x_ref.dtype)
        o_ref[...] = (w_ref[...] * normed).astype(o_ref.dtype)

    out_dtype = jnp.promote_types(x2d.dtype, w.dtype)
    return pl.pallas_call(
        kernel, grid=(rows // block,),
        in_specs=[pl.BlockSpec((block, hidden), lambda i: (i, 0)),
                  pl.BlockSpec((1, hidden), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((block, hidden), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, hidden), out_dtype),
        interpret=interpret)(x2d, w.reshape(1, hidden))


@functools.cache
def _make(impl: str, interpret: bool):
    import jax
    import jax.numpy as jnp

    def forward(x, w, eps):
        if impl == "pallas":
            return _pallas_rms(x.reshape(-1, x.shape[-1]), w, eps, interpret).reshape(
                x.shape[:-1] + (x.shape[-1],))
        xf = x.astype(jnp.float32)
        normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)).astype(x.dtype)
        return w * normed

    @functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
    def rms(x, w, eps):
        return forward(x, w, eps)

    def fwd(x, w, eps):
        return forward(x, w, eps), (x, w)

    def bwd(eps, res, g):
        x, w = res
        xf = x.astype(jnp.float32)
        inv = jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)
        normed = xf * inv
        gf = g.astype(jnp.float32)
        dw = jnp.sum((gf * normed.astype(x.dtype).astype(jnp.float32)).reshape(-1, x.shape[-1]), 0)
        gn = gf * w.astype(jnp.float32)
        dx = inv * (gn - normed * jnp.mean(gn * normed, -1, keepdims=True))
        return dx.astype(x.dtype), dw.astype(w.dtype)

    rms.defvjp(fwd, bwd)
    return rms


def _make_op(impl: str):
    from ._custom_op import platform
    from .from_jax import jax_op

    def rms(x, w, eps: float):
        # Chosen when the op is lowered, when the plugin's platform is known
        # (registering the op must not need it).
        return _make(impl, interpret=platform() != "tpu")(x, w, eps)

    return jax_op(f"torch_pjrt::rms_norm_{impl}", rms)


def _op(impl: str):
    from ._custom_op import registered
    return registered(("rms_norm", impl), lambda: _make_op(impl))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
             impl: str = "xla") -> torch.Tensor:
    """weight * (x / sqrt(mean(x^2, -1) + eps)).to(x.dtype), over the last dim."""
    if impl not in ("xla", "pallas"):
        raise ValueError(f"rms_norm: impl must be 'xla' or 'pallas', not {impl!r}")
    if weight.dim() != 1 or x.shape[-1] != weight.shape[0]:
        raise RuntimeError(f"rms_norm: weight of shape {list(weight.shape)} does not match the "
                           f"last dim of input of shape {list(x.shape)}")
    return _op(impl)(x, weight, float(eps))


class RMSNorm(torch.nn.Module):
    """A forward for Transformers' *RMSNorm modules (weight,
    variance_epsilon), swapped in by Hugging Face Kernels' kernelize(). It
    adds no state: kernelize() keeps the module and replaces its forward."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
        return rms_norm(hidden_states, self.weight, eps)
