"""What torch.compile(backend="tpu") did in this process: one record per
graph handed to the backend, one per program compiled for it, counters, and
Dynamo's reasons for re-tracing. Shared state of the package; it imports
nothing else of it."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

_lock = threading.Lock()
_graph_ids = itertools.count()


@dataclass
class CompileRecord:
    inputs: str
    seconds: float
    # "compiled", "disk" (executable loaded), "memory", or "pending": lowered
    # only, compiled with the pending graph that runs it (strict, fused)
    source: str
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
_counters = {"graphs": 0, "graph_compiles": 0, "graph_calls": 0, "graph_eager_nodes": 0,
             "graphs_routed_from_inductor": 0}


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

# Dynamo's re-trace reasons, by graph base name (set by the backend, read
# when the first program of a re-traced graph is compiled).
_retrace_reasons: dict[str, str] = {}
