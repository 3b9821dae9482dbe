"""torch.compile(backend="tpu"): FX graphs to one StableHLO program each.

Dynamo captures a graph; AOTAutograd functionalizes it and splits forward
from backward (optimizer steps, run under no_grad, come as inference graphs
whose parameter updates stay in the graph as `copy_` into inputs). Each graph
is lowered node by node with the same lowering table eager mode uses (the C++
side, `_C._compile_graph`) into one program. Outside debug mode a call
records that program into the device's pending graph (the one fused eager
uses), so the graphs of a training step run, and compile, as one program
when a value is read, at synchronize() or at the end of the optimizer step:

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

Files: capture.py (what can be lowered, decompositions), lowering.py (one
graph to nodes of the lowering table), region.py (programs per input
signature, running them with mutations), backend.py (the Dynamo and
AOTAutograd entry, partitioning), records.py (reports and counters),
output_code.py (the compiled graph AOTAutograd's cache stores, so a new
process skips AOTAutograd), graph_store.py (a graph with its fake values
as bytes), explain.py.
"""

from .backend import tpu_backend
from .capture import decompositions, kept_whole
from .explain import Explanation, explain
from .records import (compile_counters, compile_report, reset_compile_counters,
                      reset_compile_report)

__all__ = ["Explanation", "compile_counters", "compile_report", "decompositions", "explain",
           "kept_whole", "reset_compile_counters", "reset_compile_report", "tpu_backend"]
