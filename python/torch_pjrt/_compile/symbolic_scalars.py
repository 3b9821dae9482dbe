"""Foreach ops whose scalar is symbolic become per-element tensor ops.

A float that changes between calls (an optimizer's lr under a scheduler,
Adam's betas under OneCycleLR) reaches the graph as a SymFloat. AOTAutograd's
tensorify pass turns SymFloat arguments of plain elementwise ops (add, sub,
mul, div, pow on tensors) into 0-d tensor inputs of the program, so the value
changes without a recompile. It cannot do that for the foreach ops the
optimizers call (`_foreach_mul.Scalar(params, lr)`): it specializes the value
instead, Dynamo restarts with a guard on it, and every new value recompiles.

These decompositions rewrite a foreach op into its per-element ops only when
one of its scalars is symbolic (the lowering expands foreach ops per element
anyway, so the program is the same); with concrete scalars they decline and
the op stays whole.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

_aten = torch.ops.aten


def _symbolic(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_symbolic(v) for v in value)
    return isinstance(value, (torch.SymFloat, torch.SymInt))


def _per_element(scalars: Any, n: int) -> list:
    return list(scalars) if isinstance(scalars, (list, tuple)) else [scalars] * n


def _binary(element: Callable) -> Callable:
    def decompose(tensors, scalars):
        if not _symbolic(scalars):
            return NotImplemented
        return [element(t, s) for t, s in zip(tensors, _per_element(scalars, len(tensors)))]

    return decompose


def _addc(combine: Callable) -> Callable:
    # self + value * combine(tensor1, tensor2)
    def decompose(tensors, tensors1, tensors2, values=1):
        if not _symbolic(values):
            return NotImplemented
        return [_aten.add.Tensor(t, _aten.mul.Tensor(combine(a, b), v))
                for t, a, b, v in zip(tensors, tensors1, tensors2,
                                      _per_element(values, len(tensors)))]

    return decompose


def _lerp(tensors, ends, weights):
    # self + weight * (end - self)
    if not _symbolic(weights):
        return NotImplemented
    return [_aten.add.Tensor(t, _aten.mul.Tensor(_aten.sub.Tensor(e, t), w))
            for t, e, w in zip(tensors, ends, _per_element(weights, len(tensors)))]


def _pow(tensors, exponents):
    if not _symbolic(exponents):
        return NotImplemented
    return [_aten.pow.Tensor_Tensor(t, e) for t, e in zip(tensors, _per_element(exponents, len(tensors)))]


def _scalar_pow(base, exponents):
    # base ** e for a symbolic base: the base becomes a tensor first
    # (tensorify cannot take a SymFloat as the `self` of pow).
    if not _symbolic(base):
        return NotImplemented
    return [_aten.pow.Tensor_Tensor(_aten.mul.Tensor(_aten.ones_like(e), base), e) for e in exponents]


def _full_like(self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    if not _symbolic(fill_value):
        return NotImplemented
    ones = _aten.ones_like.default(self, dtype=dtype, layout=layout, device=device,
                                   pin_memory=pin_memory, memory_format=memory_format)
    return _aten.mul.Tensor(ones, fill_value)


def decompositions() -> dict:
    table: dict = {}
    for name, element in (("add", _aten.add.Tensor), ("sub", _aten.sub.Tensor),
                          ("mul", _aten.mul.Tensor), ("div", _aten.div.Tensor)):
        packet = getattr(_aten, f"_foreach_{name}")
        for overload in ("Scalar", "ScalarList"):
            table[getattr(packet, overload)] = _binary(element)
    for name, combine in (("addcdiv", _aten.div.Tensor), ("addcmul", _aten.mul.Tensor)):
        packet = getattr(_aten, f"_foreach_{name}")
        for overload in ("Scalar", "ScalarList"):
            table[getattr(packet, overload)] = _addc(combine)
    for overload in ("Scalar", "ScalarList"):
        table[getattr(_aten._foreach_lerp, overload)] = _lerp
        table[getattr(_aten._foreach_pow, overload)] = _pow
    table[_aten._foreach_pow.ScalarAndTensor] = _scalar_pow
    table[_aten.full_like.default] = _full_like
    return table
