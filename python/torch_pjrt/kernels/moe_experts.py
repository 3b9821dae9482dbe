"""A mixture-of-experts block as one kernel, and its place among
Transformers' experts implementations (`experts_implementation="torch_pjrt"`).

Transformers' `grouped_mm` path runs about twenty ops per MoE layer (sort,
gather, histc, cumsum, two grouped matmuls, gating, the inverse
permutation, the sum over top-k); its `eager` path loops over experts and
reads which are hit on the host. Here the whole block (routing, both
expert products, gating, combine) is one JAX function registered with `jax_op`: one launch in strict eager, one
call inlined into compiled programs, gradients from `jax.vjp`. On TPU the
rows are sorted by expert and both products are `lax.ragged_dot`, XLA's
ragged dot there; on other platforms, which would expand a ragged dot into
dense products masked per expert, the rows run in expert blocks
(`expert_blocks.py`).

Supported expert layouts: gated (`gate_up_proj`, concatenated [gate; up] or
GPT-OSS's interleaved columns with its clamped SwiGLU) or ungated
(`up_proj`), transposed or not, with or without biases, activations SiLU,
GELU (exact or tanh) and ReLU. Other modules (a post-expert norm, expert
parallelism, an activation this kernel does not know) run Transformers'
own `grouped_mm` path instead, with a warning naming why.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch

__all__ = ["moe_experts", "experts_forward", "register_transformers_experts"]

_ACTIVATIONS = {"SiLUActivation": "silu", "SiLU": "silu", "GELUActivation": "gelu",
                "GELU": "gelu", "GELUTanh": "gelu_tanh", "PytorchGELUTanh": "gelu_tanh",
                "NewGELUActivation": "gelu_tanh", "GeluTanh": "gelu_tanh", "ReLU": "relu"}


def _kernel(x, idx, weights, w_up, w_down, b_up=None, b_down=None, *, transposed: bool,
            gate: str, act: str, limit: float, alpha: float, method: str):
    import jax
    import jax.numpy as jnp

    tokens, top_k = idx.shape
    experts = w_up.shape[0]
    if method == "auto":  # chosen here, at lowering time, never while Dynamo traces
        method = _method()
    flat = idx.reshape(-1).astype(jnp.int32)
    if flat.shape[0] == 0:  # no tokens (or no choices): nothing is routed
        return jnp.zeros((tokens, x.shape[1]), x.dtype)

    def activate(v):
        if act == "silu":
            return jax.nn.silu(v)
        if act == "gelu":
            return jax.nn.gelu(v, approximate=False)
        if act == "gelu_tanh":
            return jax.nn.gelu(v, approximate=True)
        return jax.nn.relu(v)

    def gated(h):
        if gate == "none":
            return activate(h)
        if gate == "interleaved":  # GPT-OSS: clamped SwiGLU on (gate, up) column pairs
            g, u = h[:, ::2], h[:, 1::2]
            g = jnp.minimum(g, limit)
            u = jnp.clip(u, -limit, limit)
            return (u + 1) * (g * jax.nn.sigmoid(g * alpha))
        half = h.shape[-1] // 2
        return activate(h[:, :half]) * h[:, half:]

    if method == "blocks":
        from .expert_blocks import block_layout, block_size, expert_blocks

        # Each block reads its expert's matrices as they are stored: a
        # transposed layout is the product's contracting dimension, never a
        # transposed copy of every expert's weights.
        def product(v, w_e):
            contract = 0 if transposed else 1
            return jax.lax.dot_general(v.astype(w_e.dtype), w_e, (((1,), (contract,)), ((), ())),
                                       preferred_element_type=jnp.float32)

        def block(xb, up_e, down_e, *bias):
            h = product(xb, up_e)
            if bias:
                h = h + bias[0].astype(jnp.float32)
            out = product(gated(h), down_e)
            if bias:
                out = out + bias[1].astype(jnp.float32)
            return out

        params = [w_up, w_down] + ([b_up, b_down] if b_up is not None else [])
        layout = block_layout(flat, experts, block_size(flat.shape[0], experts))
        hidden = x.shape[1]
        out = expert_blocks(block, jnp.repeat(x, top_k, axis=0), layout, params, hidden)
        out = out * weights.reshape(-1)[:, None].astype(jnp.float32)
    else:
        # Rows sorted by expert, both products as ragged dots (XLA's grouped
        # GEMM on TPU), which take weights as [E, in, out].
        up_t = w_up if transposed else jnp.swapaxes(w_up, 1, 2)
        down_t = w_down if transposed else jnp.swapaxes(w_down, 1, 2)
        order = jnp.argsort(flat, stable=True)
        ids = flat[order]
        sizes = jnp.bincount(ids, length=experts).astype(jnp.int32)

        def matmul(v, w_t):
            return jax.lax.ragged_dot(v.astype(w_t.dtype), w_t, sizes,
                                      preferred_element_type=jnp.float32)
        h = matmul(x[order // top_k], up_t)
        if b_up is not None:
            h = h + b_up[ids].astype(jnp.float32)
        out = matmul(gated(h), down_t)
        if b_down is not None:
            out = out + b_down[ids].astype(jnp.float32)
        out = out * weights.reshape(-1)[order][:, None].astype(jnp.float32)
        out = jnp.zeros_like(out).at[order].set(out)
    return out.reshape(tokens, top_k, -1).sum(axis=1).astype(x.dtype)


def _make_op(with_bias: bool):
    from .from_jax import jax_op

    statics = "bool transposed, str gate, str act, float limit, float alpha, str method"
    if with_bias:
        def fn(x, idx, weights, w_up, w_down, b_up, b_down, transposed, gate, act, limit, alpha,
               method):
            return _kernel(x, idx, weights, w_up, w_down, b_up, b_down, transposed=transposed,
                           gate=gate, act=act, limit=limit, alpha=alpha, method=method)
        schema = (f"(Tensor x, Tensor idx, Tensor weights, Tensor w_up, Tensor w_down, "
                  f"Tensor b_up, Tensor b_down, {statics}) -> Tensor")
        return jax_op("torch_pjrt::moe_experts_bias", fn, schema=schema)

    def fn(x, idx, weights, w_up, w_down, transposed, gate, act, limit, alpha, method):
        return _kernel(x, idx, weights, w_up, w_down, transposed=transposed, gate=gate,
                       act=act, limit=limit, alpha=alpha, method=method)
    schema = (f"(Tensor x, Tensor idx, Tensor weights, Tensor w_up, Tensor w_down, "
              f"{statics}) -> Tensor")
    return jax_op("torch_pjrt::moe_experts", fn, schema=schema)


def _op(with_bias: bool):
    from ._custom_op import registered
    return registered(("moe_experts", with_bias), lambda: _make_op(with_bias))


def _method() -> str:
    """On TPU the ragged dots are XLA's grouped GEMM. Elsewhere JAX would
    expand each into a dense product per expert masked to its rows, so the
    rows run in expert blocks instead (`expert_blocks.py`)."""
    from ._custom_op import platform
    return "ragged" if platform() == "tpu" else "blocks"


_METHODS = ("blocks", "ragged")


def moe_experts(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                w_up: torch.Tensor, w_down: torch.Tensor, b_up: Optional[torch.Tensor] = None,
                b_down: Optional[torch.Tensor] = None, *, transposed: bool = False,
                gate: str = "concatenated", act: str = "silu", limit: float = 7.0,
                alpha: float = 1.702, method: Optional[str] = None) -> torch.Tensor:
    """Routes x [T, H] to its top-k experts and combines their outputs [T, H].

    w_up: [E, 2I, H] (gated) or [E, I, H], w_down: [E, H, I]; [E, H, ...] and
    [E, I, H] when `transposed`. gate: "concatenated" ([gate; up]),
    "interleaved" (GPT-OSS's clamped SwiGLU) or "none" (ungated). method:
    "blocks" or "ragged" (see `_method`); by default the platform's, read
    when the kernel is lowered: reading the plugin while Dynamo traces the
    caller would break its graph."""
    if gate not in ("concatenated", "interleaved", "none"):
        raise ValueError(f"moe_experts: gate must be concatenated, interleaved or none, not {gate!r}")
    if act not in ("silu", "gelu", "gelu_tanh", "relu"):
        raise ValueError(f"moe_experts: unknown activation {act!r}")
    if (b_up is None) != (b_down is None):
        raise ValueError("moe_experts: give both biases or neither")
    if method is not None and method not in _METHODS:
        raise ValueError(f"moe_experts: method must be one of {_METHODS} or None, not {method!r}")
    method = method or "auto"
    if b_up is not None:
        return _op(True)(x, top_k_index, top_k_weights, w_up, w_down, b_up, b_down, transposed,
                         gate, act, float(limit), float(alpha), method)
    return _op(False)(x, top_k_index, top_k_weights, w_up, w_down, transposed, gate, act,
                      float(limit), float(alpha), method)


def _layout(module: torch.nn.Module) -> tuple[Optional[dict], str]:
    """The kernel's arguments for a Transformers experts module, or why not."""
    if getattr(module, "has_post_expert_norm", False):
        return None, "a post-expert norm"
    if getattr(module, "_is_expert_parallel", False):
        return None, "expert parallelism"
    is_gpt_oss = type(module).__name__ == "GptOssExperts"
    if module.has_gate:
        w_up = module.gate_up_proj
        if is_gpt_oss:
            gate = "interleaved"
        elif getattr(module, "is_concatenated", True):
            gate = "concatenated"
        else:
            return None, "interleaved gate/up columns without GPT-OSS's gating"
        from transformers.integrations.moe import _default_apply_gate
        gate_fn = type(module)._apply_gate
        if not is_gpt_oss and gate_fn is not _default_apply_gate:
            return None, "a custom gate"
    else:
        w_up, gate = module.up_proj, "none"
    act = "silu"
    if not is_gpt_oss:
        act_fn = getattr(module, "act_fn", None)
        act = _ACTIVATIONS.get(type(act_fn).__name__)
        if act == "gelu" and getattr(act_fn, "approximate", "none") == "tanh":
            act = "gelu_tanh"
        if act is None:
            return None, f"the activation {type(act_fn).__name__}"
    args = dict(w_up=w_up, w_down=module.down_proj, transposed=bool(module.is_transposed),
                gate=gate, act=act, limit=float(getattr(module, "limit", 7.0)),
                alpha=float(getattr(module, "alpha", 1.702)))
    if module.has_bias:
        args["b_up"] = module.gate_up_proj_bias if module.has_gate else module.up_proj_bias
        args["b_down"] = module.down_proj_bias
    return args, ""


_warned: set = set()


def experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor,
                    top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """Transformers' experts-implementation signature."""
    args, why = _layout(self)
    if args is None:
        from transformers.integrations.moe import grouped_mm_experts_forward
        key = (type(self).__name__, why)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"torch_pjrt experts: {type(self).__name__} has {why}, which the "
                          "torch_pjrt kernel does not cover; Transformers' grouped_mm path runs")
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    return moe_experts(hidden_states, top_k_index, top_k_weights, **args)


def register_transformers_experts(module=None) -> None:
    """Makes `experts_implementation="torch_pjrt"` available (idempotent)."""
    if module is None:
        from transformers.integrations import moe as module
    interface = getattr(module, "ExpertsInterface", None)
    if interface is not None:
        interface.register("torch_pjrt", experts_forward)
