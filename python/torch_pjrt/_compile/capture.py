"""What the graph lowering can take: the ops the C++ lowering table serves
in graphs, the decompositions AOTAutograd applies (PyTorch's core-ATen set
minus the ops lowered natively), and the per-node check that decides which
nodes form compiled regions."""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import torch
import torch.fx

from .. import _C

_aten = torch.ops.aten

# Nodes that carry no computation once shapes are concrete.
_NO_OPS = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
           "sym_constrain_range", "_assert_async"}


def _op_name(target: torch._ops.OpOverload) -> str:
    schema = target._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


_graph_ops_cache: Optional[frozenset] = None


def _graph_ops() -> frozenset:
    global _graph_ops_cache
    if _graph_ops_cache is None:
        _graph_ops_cache = frozenset(_C._graph_lowered_ops())
    return _graph_ops_cache


_decompositions: Optional[dict] = None


def decompositions() -> dict:
    """PyTorch's core-ATen decompositions without the ops lowered natively."""
    global _decompositions
    if _decompositions is None:
        from torch._decomp import core_aten_decompositions

        from . import composite_ops
        from .symbolic_scalars import decompositions as symbolic_scalars

        lowered = _graph_ops()
        _decompositions = {
            op: fn for op, fn in core_aten_decompositions().items()
            if not (isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered)}
        # Foreach ops with a changing float (a scheduled lr) as per-element
        # ops, which AOTAutograd can give the float as a program input.
        _decompositions.update(symbolic_scalars())
        _decompositions.update({op: fn for op, fn in composite_ops.decompositions().items()
                                if _op_name(op) not in lowered})
    return _decompositions


def kept_whole() -> list[str]:
    """The ops PyTorch's core-ATen set would decompose that are lowered
    natively instead."""
    from torch._decomp import core_aten_decompositions

    lowered = _graph_ops()
    return sorted({_op_name(op) for op in core_aten_decompositions()
                   if isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered})


def _is_device_value(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return v.device.type == torch._C._get_privateuse1_backend_name()
    if isinstance(v, (list, tuple)):
        return all(_is_device_value(x) for x in v if x is not None)
    return True


# Foreach ops whose element op has another name.
_FOREACH_ELEMENT = {"norm": "linalg_vector_norm"}


def _foreach_element_op(target: torch._ops.OpOverload) -> Optional[Callable]:
    """`aten._foreach_add.List` -> a function choosing `aten.add.Tensor` for
    one element's arguments."""
    base = target._schema.name.split("::")[1]
    if not base.startswith("_foreach_") or base.endswith("_"):
        return None
    element = base[len("_foreach_"):]
    return getattr(_aten, _FOREACH_ELEMENT.get(element, element), None)


_convert_element_type = torch.ops.prims.convert_element_type.default


def _is_host_scalar(v: Any) -> bool:
    """A 0-d CPU tensor: a float AOTAutograd turned into a program input (a
    scheduled lr) and the arithmetic on it, which eager mode would also
    accept next to device tensors."""
    return isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0


def _lowerable_target(node: torch.fx.Node) -> bool:
    target = node.target
    if target is _convert_element_type:
        return True  # lowered as _to_copy(dtype=)
    if target.namespace != "aten" or target is _aten.copy_.default:
        return False  # kernel ops (torch_pjrt.jax_op) return tensors, not host scalars
    if target._schema.name.startswith("aten::_foreach_"):
        return False
    return _op_name(target) in _graph_ops()


def _node_supported(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return True
    target = node.target
    if target is operator.getitem:
        # With its source: a part of an eager node's result is eager too.
        source = node.args[0]
        return not isinstance(source, torch.fx.Node) or _node_supported(source)
    if isinstance(target, torch._ops.HigherOrderOperator):
        # with_effects (an op with side effects, e.g. linalg's error
        # checks, threaded on an effect token) and the like run eagerly.
        return False
    if not isinstance(target, torch._ops.OpOverload):
        # Python arithmetic on sizes is evaluated while lowering.
        return not isinstance(node.meta.get("val"), torch.Tensor)
    if target.namespace != "aten":
        # A kernel op (torch_pjrt.jax_op / stablehlo_op) goes into the program.
        return _is_device_value(node.meta.get("val")) and _op_name(target) in _graph_ops()
    name = target._schema.name.split("::")[1]
    if name in _NO_OPS:
        return True
    if not _is_device_value(node.meta.get("val")):
        return False
    if target is _aten.copy_.default:
        return node.args[0].op == "placeholder"
    if name.startswith("_foreach_"):
        if any(not isinstance(a.type, torch.ListType) and isinstance(a.type, torch.TensorType)
               and a.name == "scalars" for a in target._schema.arguments):
            return False  # one value per element in a tensor: not expanded
        packet = _foreach_element_op(target)
        return packet is not None and any(
            _op_name(getattr(packet, o)) in _graph_ops() for o in packet.overloads())
    return _op_name(target) in _graph_ops()


def supported_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The call nodes that can go into a program. Besides every node
    `_node_supported` takes, a node computing a 0-d CPU tensor (the lr's
    arithmetic) is computed in the program too, when everything that reads
    it is in a program as well: its value never has to come back to the
    host. Without this, each such node split the optimizer graph into
    another program (10 per AdamW step)."""
    supported = {n for n in gm.graph.nodes if n.op == "call_function" and _node_supported(n)}
    scalars = {n for n in gm.graph.nodes
               if n.op == "call_function" and n not in supported
               and isinstance(n.target, torch._ops.OpOverload)
               and _is_host_scalar(n.meta.get("val")) and _lowerable_target(n)}
    changed = True
    while changed:
        changed = False
        for n in list(scalars):
            if any(u not in supported and u not in scalars for u in n.users):
                scalars.discard(n)
                changed = True
    return supported | scalars
