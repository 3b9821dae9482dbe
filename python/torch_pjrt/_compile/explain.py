"""torch_pjrt.explain(fn, *args): what torch.compile(fn, backend="tpu")
does with one call, graph breaks, regions, eager ops and CPU fallbacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .backend import tpu_backend
from .records import _lock, _records, compile_report

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
    from .._metrics import metrics

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
