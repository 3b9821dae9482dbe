#include "eager/shared_trig.h"

#include <string>
#include <unordered_set>

#include "backend/runtime_state.h"

namespace torch_pjrt::eager {
namespace {

// "aten::mul.Tensor" -> "aten::mul", "aten::cos_" -> "aten::cos".
std::string_view base_name(std::string_view op) {
  size_t ns = op.find("::");
  size_t dot = op.find('.', ns == std::string_view::npos ? 0 : ns + 2);
  if (dot != std::string_view::npos) op = op.substr(0, dot);
  if (op.size() >= 2 && op.back() == '_' && op[op.size() - 2] != '_') op.remove_suffix(1);
  return op;
}

bool is_trig(std::string_view op) { return op == "aten::sin" || op == "aten::cos"; }

// Elementwise arithmetic, casts and layout ops: XLA fuses them with their
// operand, so a trig value seen through them is still recomputed.
bool passes_through(std::string_view op) {
  static const std::unordered_set<std::string_view> ops = {
      "aten::mul",       "aten::add",     "aten::sub",       "aten::div",
      "aten::neg",       "aten::_to_copy", "aten::to",       "aten::clone",
      "aten::copy",      "aten::view",    "aten::_unsafe_view", "aten::reshape",
      "aten::unsqueeze", "aten::squeeze", "aten::expand",    "aten::permute",
      "aten::transpose", "aten::t",       "aten::alias",     "aten::slice",
      "aten::select",    "torch_pjrt::view_read",
  };
  return ops.count(op) > 0;
}

}  // namespace

std::vector<bool> trig_values_to_share(const std::vector<ProgramOp>& ops) {
  const size_t n = ops.size();
  std::vector<bool> share(n, false);
  std::vector<int> consumers(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<int> seen;  // x * x reads x once
    for (int in : ops[i].inputs) {
      if (in >= 0 && static_cast<size_t>(in) < i && seen.insert(in).second) consumers[in]++;
    }
  }
  // Whether an op's result holds sin/cos work XLA would fuse into a
  // consumer: a trig op, or a cheap op over such a result that is not
  // itself materialized.
  std::vector<bool> carries(n, false);
  for (size_t i = 0; i < n; ++i) {
    std::string_view op = base_name(ops[i].op);
    if (is_trig(op)) {
      carries[i] = true;
    } else if (passes_through(op)) {
      for (int in : ops[i].inputs) {
        if (in >= 0 && static_cast<size_t>(in) < i && carries[in] && !share[in]) carries[i] = true;
      }
    }
    share[i] = carries[i] && consumers[i] >= 2;
  }
  return share;
}

bool shares_trig_values() {
  static const bool cpu = backend::runtime().client()->platform_name() == "cpu";
  return cpu;
}

}  // namespace torch_pjrt::eager
