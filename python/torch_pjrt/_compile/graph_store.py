"""An FX graph with its nodes' fake values, as bytes and back.

The lowering reads each node's fake value (`meta["val"]`: shape, strides,
dtype, device of a tensor, or a number) and nothing else of its metadata.
torch's GraphPickler stores all of it and took ~1.5 s per training step's
graphs, on the cold path where AOTAutograd saves its cache entry. A graph
whose values are concrete is stored here as a list of nodes (op, name,
target, arguments with nodes as indices) plus one small record per fake
value, rebuilt node by node with its fake tensors created under the loading
fake mode (about 0.3 s for the same graphs). A graph with symbolic values
(dynamic shapes) or an unusual target keeps GraphPickler, which also stores
the shape environment the symbols live in. A graph calling a kernel op
(jax_op, stablehlo_op) is not stored at all.

Tensor constants on the device are stored as host copies with their device:
a device buffer has no host bytes to pickle.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import torch
import torch.fx
from torch.fx.node import map_aggregate
from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..kernels import _custom_op as _kernels

_FORMAT = "torch_pjrt.graph/1"


class _NotPlain(Exception):
    """A value with a symbol in it, or a target this format does not name:
    the graph is stored by GraphPickler instead."""


class _Ref:
    """An argument that is the node at this index."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self):
        return (_Ref, (self.index,))


def _encode_target(target: Any) -> Any:
    if isinstance(target, str):
        return ("s", target)
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.namespace, target._opname, target._overloadname)
    if isinstance(target, torch._ops.OperatorBase) or not callable(target):
        raise _NotPlain  # higher-order ops and the like
    return ("f", target)  # a module-level function (operator.getitem, ...), by reference


def _decode_target(record: Any) -> Any:
    if record[0] == "op":
        _, namespace, name, overload = record
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    return record[1]


_PLAIN_ARGS = (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
               torch.memory_format)


def _encode_arg(arg: Any, index: dict) -> Any:
    def leaf(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return _Ref(index[a])
        if a is None or isinstance(a, _PLAIN_ARGS):
            return a
        raise _NotPlain

    return map_aggregate(arg, leaf)  # tuples, lists, dicts and slices keep their shape


def _decode_arg(arg: Any, nodes: list) -> Any:
    return map_aggregate(arg, lambda a: nodes[a.index] if isinstance(a, _Ref) else a)


def _encode(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or type(value) not in _PLAIN_TENSOR_TYPES:
            raise _NotPlain  # sparse, nested, a subclass: GraphPickler describes it
        if any(isinstance(d, torch.SymInt)
               for d in (*value.shape, *value.stride(), value.storage_offset())):
            raise _NotPlain
        return ("t", tuple(value.shape), tuple(value.stride()), value.dtype, str(value.device),
                value.storage_offset())
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _NotPlain
    if isinstance(value, (list, tuple)):
        return ("l" if isinstance(value, list) else "u", [_encode(v) for v in value])
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return ("v", value)
    raise _NotPlain  # anything else: let GraphPickler describe it


def _decode(record: Any, fake_mode: Any, made: dict) -> Any:
    kind = record[0]
    if kind == "t":
        # Nodes with the same shape, strides, dtype and device share one
        # fake tensor: the lowering reads values, never identities, and
        # making a fake tensor costs ~0.3 ms (0.8 s for a training step).
        t = made.get(record)
        if t is None:
            _, shape, stride, dtype, device, offset = record
            # A flat storage large enough for the offset (a slice, a chunk
            # start partway in) and the extent, viewed with the strides.
            extent = 0 if 0 in shape else 1 + sum((n - 1) * st for n, st in zip(shape, stride))
            with fake_mode:
                base = torch.empty(offset + extent, dtype=dtype, device=device)
                t = made[record] = base.as_strided(shape, stride, offset)
        return t
    if kind in ("l", "u"):
        items = [_decode(r, fake_mode, made) for r in record[1]]
        return items if kind == "l" else tuple(items)
    return record[1]


def _host_constants(gm: torch.fx.GraphModule) -> tuple[dict[str, Any], dict[str, str]]:
    """The graph's get_attr values, device tensors as host copies, and the
    device of each of those."""
    attrs: dict[str, Any] = {}
    devices: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = _get_attr(gm, node.target)
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            devices[node.target] = str(value.device)
            # AOTAutograd stores its entry under its fake mode.
            with unset_fake_temporarily():
                value = value.detach().cpu()
        attrs[node.target] = value
    return attrs, devices


def _plain(gm: torch.fx.GraphModule) -> tuple:
    if type(gm.graph._codegen) is not torch.fx.graph.CodeGen:
        raise _NotPlain  # pytree or boxed calling conventions
    index: dict = {}
    nodes = []
    for i, n in enumerate(gm.graph.nodes):
        nodes.append((n.op, n.name, _encode_target(n.target), _encode_arg(n.args, index),
                      _encode_arg(n.kwargs, index), _encode(n.meta.get("val"))))
        index[n] = i
    return tuple(nodes)


def _kernel_op(gm: torch.fx.GraphModule) -> Any:
    """The first kernel op the graph, its subgraphs (higher-order ops'
    bodies) or its nodes' arguments (`auto_functionalized(op, ...)`) name."""
    from torch.utils._pytree import tree_leaves

    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            for value in (node.target, *tree_leaves((node.args, node.kwargs))):
                if isinstance(value, torch._ops.OpOverload) and \
                        value.namespace in _kernels._libraries:
                    return value
    return None


def dump_graph(gm: torch.fx.GraphModule) -> bytes:
    kernel = _kernel_op(gm)
    if kernel is not None:
        # A kernel op (torch_pjrt.jax_op / stablehlo_op): the key cannot
        # cover its JAX function or module, and torch_pjrt's own kernels
        # register their ops on first use, so a new process may not have
        # it yet. Such a graph is traced again instead.
        raise BypassAOTAutogradCache(
            f"torch_pjrt: a graph calling the kernel op {kernel.name()} is not stored")
    attrs, devices = _host_constants(gm)
    try:
        nodes = _plain(gm)
    except _NotPlain:
        from torch.fx._graph_pickler import GraphPickler, Options

        # A module of its own (on a copy of the graph, which a module takes
        # ownership of) holding the host copies.
        stored = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        for target, value in attrs.items():
            _set_attr(stored, target, value)
        body = GraphPickler.dumps(
            stored, Options(ops_filter=None, node_metadata_key_filter=_KEPT_META.__contains__))
        return pickle.dumps((_FORMAT, "pickler", body, devices))
    return pickle.dumps((_FORMAT, "nodes", nodes, attrs, devices))


def load_graph(data: bytes, fake_mode: Any) -> torch.fx.GraphModule:
    stored = pickle.loads(data)
    if stored[0] != _FORMAT:
        raise RuntimeError(f"torch_pjrt: stored graph has format {stored[0]!r}, not {_FORMAT!r}")
    if stored[1] == "pickler":
        from torch.fx._graph_pickler import GraphPickler

        _, _, body, devices = stored
        gm = GraphPickler.loads(body, fake_mode)
    else:
        _, _, records, attrs, devices = stored
        graph = torch.fx.Graph()
        nodes: list = []
        made: dict = {}
        for op, name, target, args, kwargs, value in records:
            node = graph.create_node(op, _decode_target(target), _decode_arg(args, nodes),
                                     _decode_arg(kwargs, nodes), name=name)
            node.meta["val"] = _decode(value, fake_mode, made)
            nodes.append(node)
        gm = torch.fx.GraphModule(attrs, graph)
    if not isinstance(gm, torch.fx.GraphModule):
        raise RuntimeError("torch_pjrt: stored graph is not a graph module")
    with unset_fake_temporarily():
        for target, device in devices.items():
            _set_attr(gm, target, _get_attr(gm, target).to(device))
    gm.recompile()
    return gm


def _get_attr(module: torch.nn.Module, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _set_attr(module: torch.nn.Module, target: str, value: Any) -> None:
    *path, name = target.split(".")
    for part in path:
        module = getattr(module, part)
    setattr(module, name, value)


_KEPT_META = frozenset({"val"})
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter,
                       torch._subclasses.fake_tensor.FakeTensor)
