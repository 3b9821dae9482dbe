"""Flash attention: softmax(q k^T * scale) v computed over blocks of keys
with a running max and sum (the online softmax), so the [Sq, Sk] score
matrix never exists whole.

  - On TPU: the Pallas TPU flash-attention kernel JAX ships
    (jax.experimental.pallas.ops.tpu.flash_attention), compiled by Mosaic.
  - Elsewhere: the same algorithm in plain JAX (a scan over key blocks),
    which XLA compiles for the platform.

`scaled_dot_product_attention` on the tpu device uses it where it is the
faster path (torch_pjrt.kernels.sdpa): no mask but `is_causal`, no
dropout, equal head counts, and a key length at or above the threshold
measured for the platform.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["flash_attention"]

BLOCK_K = 512


def _blockwise(q, k, v, causal: bool, scale: float, block_k: int):
    import jax
    import jax.numpy as jnp

    *lead, sq, d = q.shape
    sk = k.shape[-2]
    dv = v.shape[-1]
    block = min(block_k, sk)
    blocks = -(-sk // block)
    pad = blocks * block - sk
    if pad:
        widths = [(0, 0)] * (k.ndim - 2) + [(0, pad), (0, 0)]
        k = jnp.pad(k, widths)
        v = jnp.pad(v, widths)
    kb = jnp.moveaxis(k.reshape(*lead, blocks, block, d), -3, 0)
    vb = jnp.moveaxis(v.reshape(*lead, blocks, block, dv), -3, 0)
    qf = q.astype(jnp.float32) * scale
    q_pos = jnp.arange(sq)[:, None]
    neg = jnp.float32(-1e30)

    def step(carry, blk):
        m, l, acc = carry
        kj, vj, j = blk
        s = jnp.einsum("...qd,...kd->...qk", qf, kj.astype(jnp.float32))
        k_pos = j * block + jnp.arange(block)[None, :]
        valid = k_pos < sk
        if causal:  # torch's is_causal: key j visible to query i when j <= i
            valid = valid & (k_pos <= q_pos)
        s = jnp.where(valid, s, neg)
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.where(valid, jnp.exp(s - m_new[..., None]), 0.0)
        correction = jnp.exp(m - m_new)
        l = l * correction + p.sum(-1)
        acc = acc * correction[..., None] + jnp.einsum("...qk,...kd->...qd", p,
                                                       vj.astype(jnp.float32))
        return (m_new, l, acc), None

    init = (jnp.full((*lead, sq), neg, jnp.float32), jnp.zeros((*lead, sq), jnp.float32),
            jnp.zeros((*lead, sq, dv), jnp.float32))
    (m, l, acc), _ = jax.lax.scan(step, init, (kb, vb, jnp.arange(blocks)))
    out = acc / jnp.where(l == 0, 1.0, l)[..., None]
    return out.astype(q.dtype)


def _tpu_kernel(q, k, v, causal: bool, scale: float):
    from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash
    return tpu_flash.flash_attention(q, k, v, causal=causal, sm_scale=scale)


def _make():
    from ._custom_op import platform
    from .from_jax import jax_op

    def attention(q, k, v, causal: bool, scale: float):
        # Runs when the op is lowered (its platform known then), not when
        # it is registered.
        if platform() == "tpu" and q.ndim == 4 and q.shape[-2] == k.shape[-2] and q.shape[-1] == v.shape[-1]:
            return _tpu_kernel(q, k, v, causal, scale)
        return _blockwise(q, k, v, causal, scale, BLOCK_K)

    return jax_op("torch_pjrt::flash_attention", attention)


def _op():
    from ._custom_op import registered
    return registered("flash_attention", _make)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    is_causal: bool = False, scale: Optional[float] = None) -> torch.Tensor:
    """q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv] -> [..., Sq, Dv], the
    result of F.scaled_dot_product_attention(q, k, v, is_causal=, scale=)."""
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise RuntimeError(f"flash_attention: q, k, v must have the same rank >= 2; got "
                           f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise RuntimeError(f"flash_attention: shapes do not agree: q {list(q.shape)}, "
                           f"k {list(k.shape)}, v {list(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise RuntimeError(f"flash_attention: q, k, v must share one float dtype; got "
                           f"{q.dtype}, {k.dtype}, {v.dtype}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _op()(q, k, v, bool(is_causal), scale)
