"""scaled_dot_product_attention on the tpu device picks the flash kernel
where it is faster.

The choice, per call, from `TORCH_PJRT_FLASH_SDPA` (or `set_mode`):
  - "auto" (default): the flash kernel when the call is one it computes
    (no attn_mask, dropout_p == 0, equal head counts, no GQA) and the key
    length is at least `AUTO_MIN_KEYS`; PyTorch's own decomposition
    otherwise. benchmarks/moe.py measures both at 1k and 4k keys;
  - "always": the flash kernel for every call it can compute;
  - "never": PyTorch's decomposition only.
The kernel needs JAX; without it every call takes the decomposition.
Registered on AutogradPrivateUse1, so eager, fused eager and
torch.compile all see the choice, and the kernel's own gradient applies.
"""
from __future__ import annotations

import os

import torch

from .from_jax import jax_available

__all__ = ["set_mode", "get_mode", "install", "AUTO_MIN_KEYS"]

# On the XLA CPU plugin the kernel was faster from 1024 keys up (see
# benchmarks/results/moe-*); shorter sequences keep the decomposition.
AUTO_MIN_KEYS = 1024

_mode = os.environ.get("TORCH_PJRT_FLASH_SDPA", "auto")
_library: torch.library.Library | None = None


def set_mode(mode: str) -> None:
    global _mode
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"flash SDPA mode must be auto, always or never, not {mode!r}")
    _mode = mode


def get_mode() -> str:
    return _mode


def _eligible(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    if _mode == "never" or attn_mask is not None or dropout_p != 0.0 or enable_gqa:
        return False
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        return False
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-1] != value.shape[:-1]:
        return False  # broadcasting or GQA head counts: the decomposition handles them
    if not (query.dtype == key.dtype == value.dtype) or not query.is_floating_point():
        return False
    if _mode == "auto" and key.shape[-2] < AUTO_MIN_KEYS:
        return False
    return jax_available()


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    if _eligible(query, key, value, attn_mask, dropout_p, enable_gqa):
        from .flash_attention import flash_attention
        return flash_attention(query, key, value, is_causal=is_causal, scale=scale)
    return torch.ops.aten.scaled_dot_product_attention.default.decompose(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def install() -> None:
    """Registers the choice for the tpu device (once)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
