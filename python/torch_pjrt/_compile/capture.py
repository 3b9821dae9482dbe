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

        from .symbolic_scalars import decompositions as symbolic_scalars

        lowered = _graph_ops()
        _decompositions = {
            op: fn for op, fn in core_aten_decompositions().items()
            if not (isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered)}
        # Foreach ops with a changing float (a scheduled lr) as per-element
        # ops, which AOTAutograd can give the float as a program input.
        _decompositions.update(symbolic_scalars())
        _decompositions.update(_split_free_decompositions(lowered))
    return _decompositions


def kept_whole() -> list[str]:
    """The ops PyTorch's core-ATen set would decompose that are lowered
    natively instead."""
    from torch._decomp import core_aten_decompositions

    lowered = _graph_ops()
    return sorted({_op_name(op) for op in core_aten_decompositions()
                   if isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered})


def _mean_all(x, *, dtype=None):
    return _aten.mean.dim(x, None, False, dtype=dtype)


def _diagonal_plane(x, offset: int, dim1: int, dim2: int):
    """x with (dim1, dim2) moved last and flattened into one plane dim, and
    where the diagonal lies in it: (flat, permutation, start, end, step)."""
    rank = x.dim()
    dim1, dim2 = dim1 % rank, dim2 % rank
    if dim1 == dim2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    order = [d for d in range(rank) if d not in (dim1, dim2)] + [dim1, dim2]
    plane = x.permute(*order)
    n, m = plane.shape[-2], plane.shape[-1]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    end = start + (length - 1) * (m + 1) + 1 if length else start
    return plane.reshape(*plane.shape[:-2], n * m), order, start, end, m + 1


def _diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal as a strided slice of the flattened (dim1, dim2) plane,
    where torch's decomposition takes as_strided."""
    flat, _, start, end, step = _diagonal_plane(x, offset, dim1, dim2)
    return flat[..., start:end:step]


def _diagonal_scatter(x, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """diagonal's inverse (its backward): a strided slice_scatter into the
    flattened plane."""
    flat, order, start, end, step = _diagonal_plane(x, offset, dim1, dim2)
    out = _aten.slice_scatter.default(flat, src, flat.dim() - 1, start, end, step)
    plane_shape = [x.shape[d] for d in order]
    inverse = [order.index(d) for d in range(x.dim())]
    return out.reshape(plane_shape).permute(*inverse)


def _masked_scatter(x, mask, source):
    """The k-th True of the (broadcast) mask takes source's k-th element:
    a cumulative count of the mask picks each position's element from
    source padded with one zero, which the False positions read. A True
    past source's end reads an index past the padding: the index op's
    deferred check raises it (IndexError), no value is made up."""
    mask = mask.expand(x.shape).reshape(-1)
    flat = source.reshape(-1)
    n = flat.numel()
    padded = torch.cat([flat, flat.new_zeros(1)])
    position = mask.to(torch.int64).cumsum(0) - 1
    index = torch.where(mask, torch.where(position < n, position, n + 1), n)
    return torch.where(mask, padded[index], x.reshape(-1)).reshape(x.shape)


def _masked_scatter_backward(grad, mask, sizes):
    """source's gradient: the k-th True position's gradient goes to element
    k, the rest stay zero (a scatter-add into one spare slot for the False
    positions, dropped after)."""
    n = 1
    for size in sizes:
        n *= size
    mask = mask.expand(grad.shape).reshape(-1)
    position = mask.to(torch.int64).cumsum(0) - 1
    index = torch.where(mask & (position < n), position, n)
    out = grad.new_zeros(n + 1).scatter_add(0, index, grad.reshape(-1))
    return out[:n].reshape(sizes)


def _split_free_decompositions(lowered: frozenset) -> dict:
    """Core-ATen ops that eager mode runs through a composite kernel and
    graphs keep whole, decomposed into lowered aten ops where there is no
    graph lowering for them here: without it, each (a loss's `mean()`,
    `repeat`, `diagonal`) split its graph into two programs around a
    strict-eager op. torch's own decompositions serve where they produce
    aten ops; those that produce prims (copysign, shifts by a Python int,
    round with decimals) would only move the split, and are left out.
    Random ops (exponential_, normal) stay the op eager mode runs, so
    their draws are the same in both."""
    from torch._decomp import get_decompositions

    table = get_decompositions([
        _aten.repeat.default, _aten.dist.default, _aten.ldexp.Tensor, _aten.addmv.default,
        _aten._addmm_activation.default, _aten.addmm.dtype, _aten.narrow_copy.default,
        _aten.tril_indices.default, _aten.triu_indices.default])
    table[_aten.mean.default] = _mean_all
    table[_aten.diagonal.default] = _diagonal
    table[_aten.diagonal_scatter.default] = _diagonal_scatter
    table[_aten.masked_scatter.default] = _masked_scatter
    table[_aten.masked_scatter_backward.default] = _masked_scatter_backward
    return {op: fn for op, fn in table.items()
            if isinstance(op, torch._ops.OpOverload) and _op_name(op) not in lowered}


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
        return True
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
