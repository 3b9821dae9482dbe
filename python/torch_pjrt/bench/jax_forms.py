"""The same-compiler baseline: workloads written in plain JAX (`jax.jit`),
with the weights of the PyTorch build, run on the same PJRT plugin as
torch-pjrt (`jax_jit`) or on jaxlib's own CPU client (`jax_jit_cpu`).

Both torch-pjrt and JAX end in XLA, so this separates what the PyTorch
front end costs (programs per step, Dynamo and AOTAutograd at the first
step) from what the compiler does. The JAX forms are written the way a JAX
user writes them: the whole training step (forward, backward, clipping,
AdamW with the cosine schedule computed from the step count) is one jitted
function with its parameters and optimizer state donated.

Forms: `llama_train`, `llama_fwd` and `llama_decode` (the tiny Llama of
`torch_pjrt.demo`, written out in jnp: RMSNorm, rotary embeddings,
grouped-query causal attention, SiLU MLP; decoding with a static KV cache),
and `matmul`. Other workloads have none; the harness
says so in their cells.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

from .core import Case, Mode

PLUGIN_PLATFORM = "torch_pjrt_plugin"
_compiles = [0]


def compilations() -> int:
    """XLA compilations JAX has done in this process."""
    return _compiles[0]


def unavailable() -> Optional[str]:
    try:
        import jax  # noqa: F401
    except Exception as error:
        return f"jax does not import ({type(error).__name__}: {str(error)[:100]})"
    return None


def _count_compiles() -> None:
    import jax

    def listener(event: str, duration: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            _compiles[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)


def device(mode: Mode):
    """The JAX device of a mode: the plugin torch-pjrt loaded, registered
    with JAX under its own platform name, or jaxlib's CPU."""
    import jax

    if not getattr(device, "_listening", False):
        _count_compiles()
        device._listening = True  # type: ignore[attr-defined]
    if mode.compiler == "jax_cpu":
        return jax.devices("cpu")[0]
    from jax._src import xla_bridge

    import torch_pjrt

    if PLUGIN_PLATFORM not in xla_bridge._backend_factories:
        xla_bridge.register_plugin(PLUGIN_PLATFORM,
                                   library_path=torch_pjrt.runtime.info()["plugin_path"])
    return jax.devices(PLUGIN_PLATFORM)[0]


# ---------------------------------------------------------------------------
# The tiny Llama in jnp

def llama_params(model: torch.nn.Module, dev) -> dict:
    import jax

    return {k: jax.device_put(v.detach().cpu().numpy(), dev) for k, v in model.state_dict().items()}


def _llama(config) -> Callable:
    """`apply(params, ids, pos, cache=None)`: the final hidden states of the
    tokens `ids` (batch, S) at positions pos..pos+S-1. Without a cache they
    attend causally to each other; with `cache` = (keys, values), static
    caches of shape (layers, batch, kv_heads, max_len, head_dim), their keys
    and values are written at `pos` and they attend to every cached position
    up to their own. Returns (hidden, cache)."""
    import jax
    import jax.numpy as jnp

    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = config.hidden_size // heads
    eps = config.rms_norm_eps
    theta = (config.rope_parameters or {}).get("rope_theta", 10000.0)
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))

    def rms(x, w):
        return w * (x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps))

    def rotate_half(x):
        half = x.shape[-1] // 2
        return jnp.concatenate([-x[..., half:], x[..., :half]], -1)

    def apply(p, ids, pos, cache=None):
        b, s = ids.shape
        positions = pos + jnp.arange(s)
        freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None]
        emb = jnp.concatenate([freqs, freqs], -1)
        cos, sin = jnp.cos(emb), jnp.sin(emb)
        key_positions = positions if cache is None else jnp.arange(cache[0].shape[3])
        visible = key_positions[None, :] <= positions[:, None]
        x = p["model.embed_tokens.weight"][ids]
        for i in range(config.num_hidden_layers):
            pre = f"model.layers.{i}"
            h = rms(x, p[f"{pre}.input_layernorm.weight"])

            def proj(name, n):
                w = p[f"{pre}.self_attn.{name}.weight"]
                return (h @ w.T).reshape(b, s, n, head_dim).transpose(0, 2, 1, 3)

            q, k, v = proj("q_proj", heads), proj("k_proj", kv_heads), proj("v_proj", kv_heads)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache is not None:
                cache = tuple(c.at[i].set(jax.lax.dynamic_update_slice(c[i], new, (0, 0, pos, 0)))
                              for c, new in zip(cache, (k, v)))
                k, v = cache[0][i], cache[1][i]
            keys = jnp.repeat(k, heads // kv_heads, axis=1)
            values = jnp.repeat(v, heads // kv_heads, axis=1)
            scores = (q @ keys.transpose(0, 1, 3, 2)) / math.sqrt(head_dim)
            scores = jnp.where(visible, scores, -jnp.inf)
            out = jax.nn.softmax(scores, axis=-1) @ values
            x = x + out.transpose(0, 2, 1, 3).reshape(b, s, heads * head_dim) @ \
                p[f"{pre}.self_attn.o_proj.weight"].T
            h = rms(x, p[f"{pre}.post_attention_layernorm.weight"])
            mlp = jax.nn.silu(h @ p[f"{pre}.mlp.gate_proj.weight"].T) * \
                (h @ p[f"{pre}.mlp.up_proj.weight"].T)
            x = x + mlp @ p[f"{pre}.mlp.down_proj.weight"].T
        return rms(x, p["model.norm.weight"]), cache

    return apply


def _llama_forward(config) -> Callable:
    """`forward(params, ids)`: the logits of every position."""
    apply = _llama(config)

    def forward(p, ids):
        return apply(p, ids, 0)[0] @ p["lm_head.weight"].T

    return forward


def _llama_cached_step(config) -> Callable:
    """`step(params, ids, pos, cache_k, cache_v)`: the greedy next token
    after `ids` at positions pos..pos+S-1, and the updated caches."""
    import jax.numpy as jnp

    apply = _llama(config)

    def step(p, ids, pos, cache_k, cache_v):
        hidden, (cache_k, cache_v) = apply(p, ids, pos, (cache_k, cache_v))
        logits = hidden[:, -1] @ p["lm_head.weight"].T
        return jnp.argmax(logits, axis=-1).astype(ids.dtype), cache_k, cache_v

    return step


def llama_decode(mode: Mode, model: torch.nn.Module, prompt: torch.Tensor,
                 new_tokens: int) -> Case:
    """Greedy decoding with a static KV cache, as transformers'
    `generate(cache_implementation="static")` does: one jitted prefill, then
    one jitted step per token (caches donated, no host wait per token);
    returns the prompt followed by the new tokens."""
    import jax
    import jax.numpy as jnp

    dev = device(mode)
    config = model.config
    params = llama_params(model, dev)
    batch, length = prompt.shape
    max_len = length + new_tokens
    head_dim = config.hidden_size // config.num_attention_heads
    shape = (config.num_hidden_layers, batch, config.num_key_value_heads, max_len, head_dim)
    step_fn = jax.jit(_llama_cached_step(config), donate_argnums=(3, 4))
    ids = jax.device_put(prompt.numpy(), dev)
    held: dict[str, Any] = {"out": None}

    def step():
        cache_k = jax.device_put(jnp.zeros(shape, jnp.float32), dev)
        cache_v = jax.device_put(jnp.zeros(shape, jnp.float32), dev)
        token, cache_k, cache_v = step_fn(params, ids, 0, cache_k, cache_v)
        tokens = [token]
        for i in range(new_tokens - 1):
            token, cache_k, cache_v = step_fn(params, token[:, None], length + i, cache_k, cache_v)
            tokens.append(token)
        held["out"] = jnp.concatenate([ids, jnp.stack(tokens, axis=1)], axis=1)
        return held["out"]

    return Case(step=step, sync=lambda: jax.block_until_ready(held["out"]))


def _lm_loss(forward: Callable) -> Callable:
    import jax
    import jax.numpy as jnp

    def loss(p, ids):
        logits = forward(p, ids)[:, :-1]
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))

    return loss


def llama_fwd(mode: Mode, model: torch.nn.Module, ids: torch.Tensor) -> Case:
    import jax

    dev = device(mode)
    params = llama_params(model, dev)
    x = jax.device_put(ids.numpy(), dev)
    forward = jax.jit(_llama_forward(model.config))
    last: list = [None]

    def step():
        last[0] = forward(params, x)
        return last[0]

    return Case(step=step, sync=lambda: jax.block_until_ready(last[0]))


def llama_train(mode: Mode, model: torch.nn.Module, ids: torch.Tensor, lr: float,
                t_max: int, weight_decay: float = 0.01, betas=(0.9, 0.999),
                eps: float = 1e-8, max_norm: float = 1.0) -> Case:
    """One jitted step: loss and gradients, clip_grad_norm_(max_norm), AdamW
    as torch.optim.AdamW computes it, the lr of CosineAnnealingLR(T_max)
    from the step count; parameters and state donated."""
    import jax
    import jax.numpy as jnp

    dev = device(mode)
    params = llama_params(model, dev)
    state = {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "v": jax.tree_util.tree_map(jnp.zeros_like, params),
             "step": jax.device_put(jnp.zeros((), jnp.float32), dev)}
    x = jax.device_put(ids.numpy(), dev)
    grad_fn = jax.value_and_grad(_lm_loss(_llama_forward(model.config)))
    b1, b2 = betas

    def train_step(p, s, ids):
        loss, g = grad_fn(p, ids)
        norm = jnp.sqrt(sum(jnp.sum(v * v) for v in jax.tree_util.tree_leaves(g)))
        coef = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
        step = s["step"] + 1
        rate = lr * (1 + jnp.cos(math.pi * (step - 1) / t_max)) / 2
        c1, c2 = 1 - b1 ** step, 1 - b2 ** step
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            gk = g[k] * coef
            new_m[k] = b1 * s["m"][k] + (1 - b1) * gk
            new_v[k] = b2 * s["v"][k] + (1 - b2) * gk * gk
            denom = jnp.sqrt(new_v[k]) / jnp.sqrt(c2) + eps
            new_p[k] = p[k] * (1 - rate * weight_decay) - (rate / c1) * new_m[k] / denom
        return new_p, {"m": new_m, "v": new_v, "step": step}, loss

    jitted = jax.jit(train_step, donate_argnums=(0, 1))
    held: dict[str, Any] = {"p": params, "s": state, "loss": None}

    def step():
        held["p"], held["s"], held["loss"] = jitted(held["p"], held["s"], x)
        return held["loss"]

    return Case(step=step, sync=lambda: jax.block_until_ready(held["loss"]))


def matmul(mode: Mode, a: torch.Tensor, b: torch.Tensor) -> Case:
    import jax
    import jax.numpy as jnp

    dev = device(mode)
    x, y = jax.device_put(a.numpy(), dev), jax.device_put(b.numpy(), dev)
    fn = jax.jit(jnp.matmul)
    last: list = [None]

    def step():
        last[0] = fn(x, y)
        return last[0]

    return Case(step=step, sync=lambda: jax.block_until_ready(last[0]))
