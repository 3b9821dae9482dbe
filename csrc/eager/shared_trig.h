// Which values of a multi-op program (a compiled graph, a fused eager
// graph) are kept whole, behind an optimization barrier, so that XLA
// computes them once instead of inside every consumer.
//
// XLA fuses a cheap elementwise producer into each of its consumers, and
// counts sine and cosine as cheap. On the XLA CPU plugin they are not:
// its loop fusions call scalar libm sinf/cosf per element (4M float cos:
// 13 ms, where exp takes 1.3 ms), so a sin/cos value read by several
// consumers -- a rotary embedding's tables, read by q and k in every layer
// and again in the backward -- is recomputed in each of them, over the
// consumer's (larger, broadcast) shape. Where such a value (sin or cos,
// or a chain of cheap elementwise and layout ops over one) has two or more
// consuming ops, it is materialized once. A value with one consumer stays
// fusable: a reduction over cos(x) is vectorized inside its fusion.
#pragma once

#include <string_view>
#include <vector>

namespace torch_pjrt::eager {

struct ProgramOp {
  std::string_view op;      // "aten::cos", "aten::mul.Tensor", ...
  std::vector<int> inputs;  // the producing op of each operand; -1: a parameter
};

// Per op: true where its results should pass through an optimization
// barrier. All false where the platform does not need it (see above).
std::vector<bool> trig_values_to_share(const std::vector<ProgramOp>& ops);

// Whether the current plugin recomputes fused sin/cos at a cost (the CPU
// plugin); the decision above is made only there.
bool shares_trig_values();

}  // namespace torch_pjrt::eager
