"""A compiled region: one graph (or partition) with one program per input
signature. Compiles on the first call with new input shapes (saying why),
then runs the program, writing mutated inputs back (their old buffers are
donated when nothing else holds them)."""

from __future__ import annotations

import hashlib
import operator
import time
import warnings
from typing import Any, Optional

import torch
import torch.fx

from .. import _C
from .capture import (_NO_OPS, _aten, _convert_element_type, _foreach_element_op, _graph_ops,
                      _is_device_value, _op_name)
from .lowering import (_bind, _concrete, _expected, _Lowered, _pick_overload, _Unlowerable)
from .records import CompileRecord, GraphRecord, _counters, _lock, _retrace_reasons

# Program counts of one graph at which a recompile storm is reported.
_STORM_WARNINGS = (8, 32, 128, 512)


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
        # Per call, for every argument (a decode step passes ~30): torch.Size
        # and is_cpu rather than tuple(shape) and device.type, which build
        # new objects (this took 24 us of a 147 us call).
        sig = []
        add = sig.append
        for a in args:
            if isinstance(a, torch.Tensor):
                add((a.dtype, a.shape, a.is_cpu))
            elif isinstance(a, (int, float, bool)):
                add(a)
            else:
                add(type(a).__name__)
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
            where = {True: "cpu", False: "the device"}
            return f"{self.name}: input {i} moved from {where[a[2]]} to {where[b[2]]}"
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
        results = []
        if lowered.program is not None:
            tensors = [args[i] if i >= 0 else self._constant(-1 - i, lowered.device)
                       for i in lowered.tensor_args]
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
            if target is _aten.detach.default or target is _aten.alias.default:
                # The same value in a functional graph; an output that is
                # one of an input is rebuilt as an alias by AOTAutograd.
                env[node] = value(node.args[0])
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
            if target is _convert_element_type:
                env[node] = emit("aten::_to_copy", [value(node.args[0])],
                                 {"dtype": node.args[1]}, meta)
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

        if not program_outputs:
            # Nothing computed (a graph of `loss.detach()` alone): no program.
            lowered = _Lowered(None, plan, [], tensor_args, device)
            self.programs[sig] = lowered
            self.seen.append(sig)
            return lowered
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
        elif _C._eager_mode() == "debug":
            source = "memory"
        else:
            # Lowered only: outside debug mode the graph runs inside its
            # device's pending graph, compiled (or loaded) when that runs.
            source = "pending"
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
