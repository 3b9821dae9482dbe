"""Lowering one FX graph for concrete inputs: each node goes to the C++
lowering table (`_C._compile_graph`) with symbolic sizes resolved from the
actual inputs, `copy_` into graph inputs becomes extra program outputs, and
foreach ops are expanded per element."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _C
from .capture import _graph_ops, _op_name

class _Unlowerable(Exception):
    pass


def _concrete(v: Any, bindings: dict) -> Any:
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = v.node.expr
        value = expr.xreplace(bindings) if bindings else expr
        if isinstance(v, torch.SymInt):
            return int(value)
        if isinstance(v, torch.SymFloat):
            return float(value)
        return bool(value)
    if isinstance(v, (list, tuple)):
        return type(v)(_concrete(x, bindings) for x in v)
    return v


def _bind(meta: Any, actual: Any, bindings: dict) -> None:
    if isinstance(meta, torch.Tensor) and isinstance(actual, torch.Tensor):
        for m, a in zip(meta.shape, actual.shape):
            if isinstance(m, torch.SymInt) and m.node.expr.is_Symbol:
                bindings[m.node.expr] = a
    elif isinstance(meta, torch.SymInt) and meta.node.expr.is_Symbol:
        bindings[meta.node.expr] = int(actual)


def _expected(meta: Any, bindings: dict) -> list:
    values = meta if isinstance(meta, (list, tuple)) else [meta]
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append((v.dtype, [int(_concrete(d, bindings)) for d in v.shape]))
        else:
            out.append((None, []))
    return out


def _arg_kind_ok(schema_type: Any, value: Any) -> bool:
    t = schema_type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    is_tensor = isinstance(t, torch.TensorType)
    if isinstance(value, _C._GraphRef):
        return is_tensor
    if isinstance(value, (bool, int, float)):
        return not is_tensor and not isinstance(t, torch.ListType)
    return True


def _pick_overload(packet, args: list, names: list, kwargs: dict):
    """The overload of `packet` taking one element's arguments: positional
    values by position, then by name (foreach ops pass `value` positionally
    where the element op takes it as a keyword). Returns it with the
    arguments laid out for it."""
    order = sorted(packet.overloads(), key=lambda o: {"Tensor": 0, "Scalar": 1, "default": 2}.get(o, 3))
    for overload_name in order:
        overload = getattr(packet, overload_name)
        if _op_name(overload) not in _graph_ops():
            continue
        formals = overload._schema.arguments
        pos = [f for f in formals if not f.kwarg_only]
        call_args = list(args[:len(pos)])
        call_kwargs = dict(kwargs)
        for name, v in zip(names[len(pos):], args[len(pos):]):
            call_kwargs[name] = v
        by_name = {f.name: f for f in formals}
        if any(k not in by_name for k in call_kwargs):
            continue
        if not all(_arg_kind_ok(f.type, v) for f, v in zip(pos, call_args)):
            continue
        if not all(_arg_kind_ok(by_name[k].type, v) for k, v in call_kwargs.items()):
            continue
        given = {f.name for f in pos[:len(call_args)]} | set(call_kwargs)
        if all(f.name in given or f.has_default_value() for f in formals):
            return overload, call_args, call_kwargs
    raise _Unlowerable(f"no element op of {packet} for these arguments")


@dataclass
class _Lowered:
    program: Any
    plan: list  # per graph output: ("result", k) | ("arg", i) | ("value", v)
    mutations: list  # (tensor input index, program result index)
    tensor_args: list  # graph argument index per program input (constants: -1 - k)
    device: int
