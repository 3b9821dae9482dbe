"""torch.compile(backend="tpu"): FX graphs to one StableHLO program each.

Dynamo captures a graph; AOTAutograd functionalizes it and splits forward
from backward (optimizer steps, run under no_grad, come as inference graphs
whose parameter updates stay in the graph as `copy_` into inputs). Each graph
is lowered node by node with the same lowering table eager mode uses (the C++
side, `_C._compile_graph`), compiled once through the program cache (memory
and disk), and run as one executable:

- Shapes are concrete when a graph is lowered. A graph is compiled on its
  first call for the input shapes it sees; symbolic sizes (Dynamo's
  automatic dynamic shapes) are resolved from the actual inputs, so a new
  shape compiles a new program and the reason names the input and dim.
- Input mutations (`copy_` of a new value into a graph input) become extra
  program outputs written back into the input's storage; the old buffer is
  donated to the program when nothing else holds it, so an optimizer step
  keeps one copy of the weights.
- A node the table cannot lower is split out: the graph is partitioned into
  lowered regions and the remaining nodes, which run in strict eager mode.
  Each such node is counted and listed by `compile_report()`.
- Decompositions: PyTorch's core-ATen set minus every op the table lowers
  natively (softmax and its backward, layer norm, embedding backward, ...).
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.fx

from . import _C

_aten = torch.ops.aten
_lock = threading.Lock()
_graph_ids = itertools.count()

# Program counts of one graph at which a recompile storm is reported.
_STORM_WARNINGS = (8, 32, 128, 512)

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

        lowered = _graph_ops()
        _decompositions = {
            op: fn for op, fn in core_aten_decompositions().items()
            if not (isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered)}
    return _decompositions


def kept_whole() -> list[str]:
    """The ops PyTorch's core-ATen set would decompose that are lowered
    natively instead."""
    from torch._decomp import core_aten_decompositions

    lowered = _graph_ops()
    return sorted({_op_name(op) for op in core_aten_decompositions()
                   if isinstance(op, torch._ops.OpOverload) and _op_name(op) in lowered})


# --------------------------------------------------------------------------
# Reporting

@dataclass
class CompileRecord:
    inputs: str
    seconds: float
    source: str  # "compiled", "disk" (executable loaded), "memory"
    reason: str


@dataclass
class GraphRecord:
    name: str
    kind: str
    nodes: int
    regions: int = 0
    eager_ops: dict = field(default_factory=dict)
    compiles: list = field(default_factory=list)
    calls: int = 0
    lowering_failures: list = field(default_factory=list)


_records: list[GraphRecord] = []
_counters = {"graphs": 0, "graph_compiles": 0, "graph_calls": 0, "graph_eager_nodes": 0}


def compile_report() -> list[dict[str, Any]]:
    """Every graph torch.compile handed to the backend in this process: its
    kind (forward, backward, inference), node count, the ops that run
    eagerly because they have no lowering, each compilation (input shapes,
    seconds, whether the executable came from the disk cache, the reason)
    and how often it ran."""
    with _lock:
        return [{
            "name": r.name, "kind": r.kind, "nodes": r.nodes, "regions": r.regions,
            "eager_ops": dict(r.eager_ops), "calls": r.calls,
            "compiles": [c.__dict__.copy() for c in r.compiles],
            "lowering_failures": list(r.lowering_failures),
        } for r in _records]


def compile_counters() -> dict[str, int]:
    with _lock:
        return dict(_counters)


def reset_compile_report() -> None:
    with _lock:
        _records.clear()
        for k in _counters:
            _counters[k] = 0


def reset_compile_counters() -> None:
    with _lock:
        for k in _counters:
            _counters[k] = 0


# --------------------------------------------------------------------------
# What can be lowered

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
        return False
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


# --------------------------------------------------------------------------
# Lowering one graph for concrete inputs

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


class _Region:
    """One graph (or partition) compiled to programs, one per input shapes."""

    def __init__(self, gm: torch.fx.GraphModule, record: GraphRecord, name: str) -> None:
        self.gm = gm
        self.record = record
        self.name = name
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        self.key = hashlib.sha256(gm.code.encode()).hexdigest()[:32]
        self.constants: dict[str, torch.Tensor] = {}
        self.programs: dict[tuple, _Lowered] = {}
        self.seen: list[tuple] = []

    @staticmethod
    def _signature(args) -> tuple:
        sig = []
        for a in args:
            if isinstance(a, torch.Tensor):
                sig.append((a.dtype, tuple(a.shape), a.device.type))
            elif isinstance(a, (int, float, bool)):
                sig.append(a)
            else:
                sig.append(type(a).__name__)
        return tuple(sig)

    def _reason(self, sig: tuple) -> str:
        if not self.seen:
            retrace = _retrace_reasons.get(self.name.split("_")[0])
            if retrace:
                return f"{self.name}: recompiled by Dynamo: {retrace}"
            return f"new graph: {self.name}"
        prev = self.seen[-1]
        pairs = list(enumerate(zip(prev, sig)))
        for i, (a, b) in pairs:
            if a == b or not (isinstance(a, tuple) and isinstance(b, tuple)):
                continue
            if a[0] != b[0]:
                return f"{self.name}: input {i} dtype {a[0]} -> {b[0]}"
            if len(a[1]) != len(b[1]):
                return f"{self.name}: input {i} rank {len(a[1])} -> {len(b[1])}"
            for d, (x, y) in enumerate(zip(a[1], b[1])):
                if x != y:
                    return f"{self.name}: input {i} dim {d} changed {x} -> {y}"
            return f"{self.name}: input {i} moved from {a[2]} to {b[2]}"
        for i, (a, b) in pairs:
            if a != b:
                return f"{self.name}: size argument {i} changed {a} -> {b}"
        return f"{self.name}: new input combination"

    def __call__(self, *args):
        sig = self._signature(args)
        lowered = self.programs.get(sig)
        if lowered is None:
            lowered = self._compile(args, sig)
        with _lock:
            self.record.calls += 1
            _counters["graph_calls"] += 1
        tensors = []
        for i in lowered.tensor_args:
            tensors.append(args[i] if i >= 0 else self._constant(-1 - i, lowered.device))
        results = lowered.program.run(tensors, lowered.device, lowered.mutations)
        out = []
        for kind, v in lowered.plan:
            if kind == "result":
                out.append(results[v])
            elif kind == "arg":
                out.append(args[v])
            else:
                out.append(v)
        return out

    def _constant(self, k: int, device: int) -> torch.Tensor:
        name = self._constant_names[k]
        t = self.constants.get(name)
        if t is None:
            t = getattr(self.gm, name)
            if not _is_device_value(t):
                t = t.to(torch.device(torch._C._get_privateuse1_backend_name(), device))
            self.constants[name] = t
        return t

    def _compile(self, args, sig) -> _Lowered:
        device = next((a.device.index for a in args
                       if isinstance(a, torch.Tensor) and _is_device_value(a)), None)
        if device is None:
            device = _C._current_device()
        bindings: dict = {}
        env: dict[torch.fx.Node, Any] = {}
        inputs: list[list] = []
        tensor_args: list[int] = []
        input_of_placeholder: dict[torch.fx.Node, int] = {}
        self._constant_names: list[str] = []
        for i, (node, a) in enumerate(zip(self.placeholders, args)):
            _bind(node.meta.get("val"), a, bindings)
            if isinstance(a, torch.Tensor):
                input_of_placeholder[node] = len(inputs)
                env[node] = _C._GraphRef(-1 - len(inputs), 0)
                inputs.append([a.dtype, list(a.shape), False])
                tensor_args.append(i)
            else:
                env[node] = a
        nodes: list[tuple] = []
        mutations: list[tuple[int, _C._GraphRef]] = []

        def value(a):
            if isinstance(a, torch.fx.Node):
                return env[a]
            if isinstance(a, (list, tuple)):
                return [value(x) for x in a]
            if isinstance(a, dict):
                return {k: value(v) for k, v in a.items()}
            return _concrete(a, bindings)

        def emit(op: str, args: list, kwargs: dict, meta: Any, count: Optional[int] = None):
            index = len(nodes)
            nodes.append((op, tuple(args), dict(kwargs), _expected(meta, bindings)))
            if isinstance(meta, (list, tuple)):
                return [_C._GraphRef(index, k) for k in range(len(meta))]
            return _C._GraphRef(index, 0)

        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                k = len(self._constant_names)
                self._constant_names.append(node.target)
                t = getattr(self.gm, node.target)
                if not isinstance(t, torch.Tensor):
                    raise _Unlowerable(f"attribute {node.target} is not a tensor")
                env[node] = _C._GraphRef(-1 - len(inputs), 0)
                inputs.append([t.dtype, list(t.shape), False])
                tensor_args.append(-1 - k)
                continue
            if node.op != "call_function":
                continue
            target = node.target
            meta = node.meta.get("val")
            if target is operator.getitem:
                base = env[node.args[0]]
                env[node] = base[node.args[1]]
                continue
            if not isinstance(target, torch._ops.OpOverload):
                if isinstance(meta, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
                    env[node] = _concrete(meta, bindings)
                else:
                    env[node] = target(*value(list(node.args)), **value(dict(node.kwargs)))
                continue
            name = target._schema.name.split("::")[1]
            if name in _NO_OPS:
                env[node] = None
                continue
            if target is _aten.sym_size.int or target is _aten.sym_numel.default or \
                    target is _aten.sym_stride.int:
                env[node] = _concrete(meta, bindings)
                continue
            if target is _aten.copy_.default:
                dst = node.args[0]
                if dst not in input_of_placeholder:
                    raise _Unlowerable("copy_ into something other than a graph input")
                ref = emit("aten::copy", [env[dst], value(node.args[1])], {}, meta)
                idx = input_of_placeholder[dst]
                inputs[idx][2] = True
                mutations.append((idx, ref))
                env[node] = ref
                continue
            if name.startswith("_foreach_"):
                env[node] = self._emit_foreach(target, node, value, emit)
                continue
            op = _op_name(target)
            if op not in _graph_ops():
                raise _Unlowerable(f"no lowering for {op}")
            env[node] = emit(op, value(list(node.args)), value(dict(node.kwargs)), meta)

        outs = self.output.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        program_outputs: list = []
        plan: list = []
        for o in outs:
            v = env[o] if isinstance(o, torch.fx.Node) else o
            if isinstance(v, _C._GraphRef):
                if v.node < 0:
                    pos = -1 - v.node
                    if tensor_args[pos] >= 0:
                        plan.append(("arg", tensor_args[pos]))
                        continue
                plan.append(("result", len(program_outputs)))
                program_outputs.append(v)
            else:
                plan.append(("value", v))
        mutation_pairs = []
        for idx, ref in mutations:
            mutation_pairs.append((idx, len(program_outputs)))
            program_outputs.append(ref)

        reason = self._reason(sig)
        before = _C._counters()
        start = time.perf_counter()
        program = _C._compile_graph(self.name, self.key, reason,
                                    [tuple(i) for i in inputs], nodes, program_outputs)
        seconds = time.perf_counter() - start
        after = _C._counters()
        if after.get("compilations", 0) > before.get("compilations", 0):
            source = "compiled"
        elif after.get("cache_hits_disk", 0) > before.get("cache_hits_disk", 0):
            source = "disk"
        else:
            source = "memory"
        lowered = _Lowered(program, plan, mutation_pairs, tensor_args, device)
        self.programs[sig] = lowered
        self.seen.append(sig)
        shapes = ", ".join(f"{str(d).replace('torch.', '')}{list(s)}" for d, s, _ in inputs)
        with _lock:
            self.record.compiles.append(CompileRecord(shapes, seconds, source, reason))
            _counters["graph_compiles"] += 1
        if len(self.programs) in _STORM_WARNINGS:
            # A recompile storm: every new size of a dynamic dim is a new XLA
            # program. Say so once it starts, with what keeps changing.
            warnings.warn(
                f"torch_pjrt: {self.name} has now compiled {len(self.programs)} programs, one per "
                f"input shape (latest: {reason}); pad the changing dimension to a few fixed sizes "
                f"to stop recompiling (torch_pjrt.compile_report() lists them all)",
                RuntimeWarning, stacklevel=2)
        return lowered

    def _emit_foreach(self, target, node, value, emit):
        packet = _foreach_element_op(target)
        formals = target._schema.arguments
        args = value(list(node.args))
        kwargs = value(dict(node.kwargs))
        positional, named, names = [], {}, []
        lists = []
        for i, f in enumerate(formals):
            if i < len(args):
                v = args[i]
            elif f.name in kwargs:
                v = kwargs[f.name]
            elif f.has_default_value():
                v = f.default_value
            else:
                raise _Unlowerable(f"{_op_name(target)}: missing argument {f.name}")
            if isinstance(f.type, torch.ListType) and isinstance(v, list):
                lists.append((f.kwarg_only, f.name if f.kwarg_only else len(positional)))
            if f.kwarg_only:
                named[f.name] = v
            else:
                positional.append(v)
                names.append(f.name)
        n = len(positional[lists[0][1]])
        meta = node.meta.get("val")
        out = []
        for k in range(n):
            elem, elem_kw = list(positional), dict(named)
            for kw, where in lists:
                if kw:
                    elem_kw[where] = elem_kw[where][k]
                else:
                    elem[where] = elem[where][k]
            overload, call_args, call_kwargs = _pick_overload(packet, elem, names, elem_kw)
            elem_meta = meta[k] if isinstance(meta, (list, tuple)) else None
            out.append(emit(_op_name(overload), call_args, call_kwargs, elem_meta))
        return out


# --------------------------------------------------------------------------
# The backend

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
    unsupported = [n for n in nodes if not _node_supported(n)]
    if not unsupported:
        record.regions = 1
        region = _Region(gm, record, name)
        return _with_eager_fallback(region, gm, record)
    for n in unsupported:
        key = _op_name(n.target) if isinstance(n.target, torch._ops.OpOverload) else str(n.target)
        record.eager_ops[key] = record.eager_ops.get(key, 0) + 1
    with _lock:
        _counters["graph_eager_nodes"] += len(unsupported)
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
            return node.op == "call_function" and _node_supported(node) and \
                isinstance(node.target, torch._ops.OpOverload)

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
    from torch._functorch.aot_autograd import make_boxed_func

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        fn = _build(gm, kind, base)

        def call(*args):
            out = fn(*args)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        return make_boxed_func(call)

    return compile_graph


_failures_seen: dict = {}
_retrace_reasons: dict[str, str] = {}


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
    return backend(gm, example_inputs)


# --------------------------------------------------------------------------
# explain()

@dataclass
class Explanation:
    """What `torch.compile(fn, backend="tpu")` does with one call of `fn`."""

    graph_count: int
    graph_breaks: list  # (reason's first line, "file:line")
    graphs: list  # compile_report() entries of this call
    fallback_ops: dict  # ops that ran on the CPU (no eager lowering either)

    @property
    def eager_ops(self) -> dict:
        out: dict = {}
        for g in self.graphs:
            for op, n in g["eager_ops"].items():
                out[op] = out.get(op, 0) + n
        return out

    def __str__(self) -> str:
        lines = [f"{self.graph_count} graph(s), {len(self.graph_breaks)} graph break(s)"]
        for reason, where in self.graph_breaks:
            lines.append(f"  break at {where}: {reason}")
        for g in self.graphs:
            compiles = ", ".join(f"{c['seconds']:.2f} s ({c['source']})" for c in g["compiles"])
            lines.append(f"  {g['name']}: {g['nodes']} nodes in {g['regions']} program region(s)"
                         f"{'; programs built in ' + compiles if compiles else ''}")
            for op, n in g["eager_ops"].items():
                lines.append(f"    runs eagerly (no graph lowering): {op} x{n}")
            for failure in g["lowering_failures"]:
                lines.append(f"    whole graph ran eagerly: {failure}")
        if self.fallback_ops:
            lines.append("  ran on the CPU (no lowering at all): " +
                         ", ".join(f"{op} x{n}" for op, n in self.fallback_ops.items()))
        if not self.graph_breaks and not self.eager_ops and not self.fallback_ops:
            lines.append("  everything ran as compiled programs on the device")
        return "\n".join(lines)


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """Compiles `fn` with the tpu backend, runs it once on `args`, and says
    what happened: Dynamo's graph breaks (with the user's line), each
    graph's nodes and program regions, the ops split out to run eagerly, and
    the ops that fell back to the CPU. Dynamo's caches are reset first."""
    from ._metrics import metrics

    torch._dynamo.reset()
    dynamo = torch._dynamo.explain(fn)(*args, **kwargs)
    breaks = []
    for r in dynamo.break_reasons:
        where = f"{r.user_stack[-1].filename}:{r.user_stack[-1].lineno}" if r.user_stack else "?"
        breaks.append((str(r.reason).strip().splitlines()[0], where))
    torch._dynamo.reset()
    with _lock:
        first = len(_records)
    before = dict(metrics()["fallback_ops"])
    torch.compile(fn, backend=tpu_backend)(*args, **kwargs)
    after = metrics()["fallback_ops"]
    fallbacks = {op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)}
    graphs = compile_report()[first:]
    return Explanation(dynamo.graph_count, breaks, graphs, fallbacks)
