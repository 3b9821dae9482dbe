"""Grouped (ragged) matmul: rows of `x` in consecutive groups, group g
multiplied by `w[g]`. On TPU, `lax.ragged_dot`: XLA's ragged dot there (the
Megablox-style grouped GEMM), with JAX's ragged-dot gradients. Elsewhere a
ragged dot would be a dense product per group masked to its rows, so the
rows run in per-group blocks (`expert_blocks.py`, the MoE kernel's scheme)."""
from __future__ import annotations


import torch

__all__ = ["grouped_matmul"]


def _make():
    from .from_jax import jax_op

    def gmm(x, w, group_sizes):
        import jax
        import jax.numpy as jnp

        from ._custom_op import platform

        if platform() == "tpu":
            return jax.lax.ragged_dot(x, w, group_sizes.astype(jnp.int32),
                                      preferred_element_type=jnp.float32).astype(x.dtype)
        from .expert_blocks import block_layout, block_size, expert_blocks

        rows, groups = x.shape[0], w.shape[0]
        if rows == 0 or groups == 0:
            return jnp.zeros((rows, w.shape[2]), x.dtype)
        ends = jnp.cumsum(group_sizes.astype(jnp.int32))
        group = jnp.searchsorted(ends, jnp.arange(rows, dtype=jnp.int32), side="right",
                                 method="compare_all")
        inside = group < groups
        # Rows past the last group ride with the last group and are zeroed:
        # their results, and so their gradients, are dropped.
        group = jnp.minimum(group, groups - 1).astype(jnp.int32)
        layout = block_layout(group, groups, block_size(rows, groups))

        def block(xb, w_g):
            return jnp.dot(xb, w_g, preferred_element_type=jnp.float32)

        out = expert_blocks(block, x, layout, [w], w.shape[2])
        return jnp.where(inside[:, None], out, 0).astype(x.dtype)

    return jax_op("torch_pjrt::grouped_matmul", gmm,
                  schema="(Tensor x, Tensor w, Tensor group_sizes) -> Tensor")


def _op():
    from ._custom_op import registered
    return registered("grouped_matmul", _make)


def grouped_matmul(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """x [M, K], w [G, K, N], group_sizes [G] (integers summing to at most M)
    -> [M, N]; rows past the groups are zeros. The same product as
    `torch._grouped_mm(x, w, offs=group_sizes.cumsum(0))`."""
    if x.dim() != 2 or w.dim() != 3 or group_sizes.dim() != 1:
        raise RuntimeError(f"grouped_matmul: expected x [M, K], w [G, K, N], group_sizes [G]; got "
                           f"x {list(x.shape)}, w {list(w.shape)}, group_sizes {list(group_sizes.shape)}")
    if x.shape[1] != w.shape[1] or w.shape[0] != group_sizes.shape[0]:
        raise RuntimeError(f"grouped_matmul: shapes do not agree: x {list(x.shape)}, "
                           f"w {list(w.shape)}, group_sizes {list(group_sizes.shape)}")
    if x.dtype != w.dtype:
        raise RuntimeError(f"grouped_matmul: x is {x.dtype} but w is {w.dtype}")
    if group_sizes.is_floating_point() or group_sizes.is_complex():
        raise RuntimeError(f"grouped_matmul: group_sizes must be integers, got {group_sizes.dtype}")
    return _op()(x, w, group_sizes)
