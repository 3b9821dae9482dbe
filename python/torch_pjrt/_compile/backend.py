"""The backend Dynamo calls: AOTAutograd with the package's decompositions,
each forward, backward and inference graph partitioned into compiled
regions and nodes left to strict eager mode."""

from __future__ import annotations

from typing import Callable

import copy
import operator

import torch
import torch.fx

from .capture import _op_name, decompositions, supported_nodes
from .lowering import _Unlowerable
from .records import GraphRecord, _counters, _graph_ids, _lock, _records, _retrace_reasons
from .region import _Region

_failures_seen: dict = {}


def _new_guard_failures() -> list[str]:
    """Dynamo's reasons for re-tracing since the backend was last called
    (e.g. "tensor 'x' size mismatch at index 1. expected 16, actual 32")."""
    try:
        from torch._dynamo.utils import guard_failures
    except ImportError:
        return []
    new = []
    for code, reasons in list(guard_failures.items()):
        seen = _failures_seen.get(code, 0)
        if seen > len(reasons):  # torch._dynamo.reset() cleared them
            seen = 0
        new.extend(str(r) for r in reasons[seen:])
        _failures_seen[code] = len(reasons)
    return new


class _RegionModule(torch.nn.Module):
    def __init__(self, region: _Region) -> None:
        super().__init__()
        self.region = region

    def forward(self, *args):
        out = self.region(*args)
        return tuple(out) if len(out) != 1 else out[0]


def _build(gm: torch.fx.GraphModule, kind: str, base: str) -> Callable:
    name = f"{base}_{kind}"
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    record = GraphRecord(name=name, kind=kind, nodes=len(nodes))
    with _lock:
        _records.append(record)
        _counters["graphs"] += 1
    supported = supported_nodes(gm)
    unsupported = [n for n in nodes if n not in supported]
    if not unsupported:
        record.regions = 1
        region = _Region(gm, record, name)
        return _with_eager_fallback(region, gm, record)
    # The parts taken of an eager node's result (getitem) are not ops of
    # their own: not listed.
    listed = [n for n in unsupported if n.target is not operator.getitem]
    for n in listed:
        key = _op_name(n.target) if isinstance(n.target, torch._ops.OpOverload) else str(n.target)
        record.eager_ops[key] = record.eager_ops.get(key, 0) + 1
    with _lock:
        _counters["graph_eager_nodes"] += len(listed)
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
            # A multi-output op's getitem goes with it: left out, each
            # native_group_norm ended a program (22 per diffusers UNet).
            return node.op == "call_function" and node in supported and (
                isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem)

    # The partitioner rewrites the module it is given: it gets a copy, so
    # the graph AOTAutograd handed over stays whole (it may be stored). The
    # copy keeps the nodes' order, which maps each node to its copy.
    original = gm.graph.nodes
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    supported = {new for old, new in zip(original, gm.graph.nodes) if old in supported}
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    split = partitioner.fuse_partitions(partitions)
    count = 0
    for child_name, child in list(split.named_children()):
        if isinstance(child, torch.fx.GraphModule):
            region = _Region(child, record, f"{name}.{child_name}")
            setattr(split, child_name, _RegionModule(region))
            count += 1
    record.regions = count
    split.recompile()
    return split


def _with_eager_fallback(region: _Region, gm: torch.fx.GraphModule, record: GraphRecord):
    """Runs the region; if lowering the graph fails (an op's arguments the
    lowering rejects, which the capability check cannot see), the graph runs
    in strict eager mode instead, and the failure is recorded."""
    state = {"eager": False}

    def run(*args):
        if not state["eager"]:
            try:
                return region(*args)
            except _Unlowerable as error:
                state["eager"] = True
                with _lock:
                    record.lowering_failures.append(str(error))
                    record.eager_ops["<whole graph>"] = record.eager_ops.get("<whole graph>", 0) + 1
                    _counters["graph_eager_nodes"] += record.nodes
        out = gm(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    return run


def _compiler(kind: str, base: str):
    """AOTAutograd's compiler for one kind of graph. It returns a
    `TpuOutputCode`, which AOTAutograd's cache can store and load back."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    # Imported here: it imports inductor's OutputCode, ~1 s that
    # `import torch_pjrt` should not pay.
    from .output_code import TpuOutputCode

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        return TpuOutputCode(gm, kind, base, _build)

    return SerializableAOTDispatchCompiler(TpuOutputCode, compile_graph)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The `torch.compile` backend: `torch.compile(model, backend="tpu")`."""
    from torch._dynamo.backends.common import aot_autograd

    base = f"graph{next(_graph_ids)}"
    failures = _new_guard_failures()
    if failures:
        _retrace_reasons[base] = "; ".join(failures)
    backend = aot_autograd(
        fw_compiler=_compiler("forward", base),
        bw_compiler=_compiler("backward", base),
        inference_compiler=_compiler("inference", base),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    # AOTAutograd's cache stores our graphs only in its bundled form (the
    # compiled graphs inside the entry), and the backward's only when it is
    # compiled with the forward rather than at the first backward (building
    # it then costs nothing here: programs are lowered on first call). The
    # key gets what else shapes the graphs (`cache_identity`).
    from .output_code import cache_identity, current_graph

    tag = torch.compiler.config.cache_key_tag
    identity = cache_identity()
    token = current_graph.set(base)
    try:
        with torch.compiler.config.patch(cache_key_tag=f"{tag}|{identity}" if tag else identity), \
                torch._functorch.config.patch(bundled_autograd_cache=True,
                                              force_non_lazy_backward_lowering=True):
            return backend(gm, example_inputs)
    finally:
        current_graph.reset(token)
