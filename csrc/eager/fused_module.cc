#include "eager/fused_module.h"

#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "eager/shared_trig.h"
#include "hlo/builder.h"

namespace torch_pjrt::eager {
namespace {

std::string types_of(const std::vector<hlo::TensorType>& types) {
  std::string out;
  for (size_t i = 0; i < types.size(); ++i) out += (i ? ", " : "") + types[i].mlir();
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

std::string as_private_function(const std::string& module_text, const std::string& name) {
  // hlo::Builder prints "module @NAME {\n  func.func public @main(...) ... {\n ... \n  }\n"
  // then any external functions, then "}\n".
  const std::string head = "func.func public @main(";
  size_t begin = module_text.find(head);
  size_t end = begin == std::string::npos ? begin : module_text.find("\n  }\n", begin);
  if (begin == std::string::npos || end == std::string::npos) {
    throw std::runtime_error("fused eager: an op program is not a module with @main");
  }
  std::string fn = "  func.func private @" + name + "(" +
                   module_text.substr(begin + head.size(), end + 5 - begin - head.size());
  replace_all(fn, " {jax.buffer_donor = true}", "");
  return fn;
}

std::vector<std::pair<std::string, std::string>> external_functions(
    const std::string& module_text) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string marker = hlo::kExternalMarker;
  size_t at = module_text.find(marker);
  while (at != std::string::npos) {
    size_t symbol_end = module_text.find('\n', at);
    if (symbol_end == std::string::npos) break;
    std::string symbol = module_text.substr(at + marker.size(), symbol_end - at - marker.size());
    size_t next = module_text.find(marker, symbol_end);
    size_t stop = next == std::string::npos ? module_text.rfind('}') : next;
    out.emplace_back(symbol, module_text.substr(symbol_end + 1, stop - symbol_end - 1));
    at = next;
  }
  return out;
}

std::string fused_module_text(const std::vector<hlo::TensorType>& params,
                              const std::vector<bool>& donated,
                              const std::vector<FusedCall>& calls,
                              const std::vector<FusedRef>& outputs) {
  std::string functions;
  std::unordered_map<const backend::Program*, std::string> names;
  std::unordered_set<std::string> externals;  // each kernel's definitions once
  for (const FusedCall& call : calls) {
    if (names.count(call.program)) continue;
    for (auto& [symbol, text] : external_functions(call.program->mlir)) {
      if (externals.insert(symbol).second) functions += text;
    }
    // Named after the op, so a dumped fused program reads as what was recorded.
    std::string name =
        "f" + std::to_string(names.size()) + "_" + backend::identifier(call.program->op);
    functions += as_private_function(call.program->mlir, name);
    names.emplace(call.program, std::move(name));
  }

  auto type_of = [&](const FusedRef& r) -> const hlo::TensorType& {
    return r.node < 0 ? params[r.index] : calls[r.node].program->outputs[r.index];
  };
  // Trig values read by several calls are materialized once (shared_trig.h).
  std::vector<bool> barrier(calls.size(), false);
  if (shares_trig_values()) {
    std::vector<ProgramOp> ops(calls.size());
    for (size_t n = 0; n < calls.size(); ++n) {
      ops[n].op = calls[n].program->op;
      for (const FusedRef& r : calls[n].inputs) ops[n].inputs.push_back(r.node);
    }
    barrier = trig_values_to_share(ops);
  }
  auto call_result = [&](const FusedRef& r) {
    const auto& outs = calls[r.node].program->outputs;
    std::string base = "%c" + std::to_string(r.node);
    return outs.size() == 1 ? base : base + "#" + std::to_string(r.index);
  };
  auto name_of = [&](const FusedRef& r) {
    if (r.node < 0) return "%a" + std::to_string(r.index);
    if (barrier[r.node]) return "%s" + std::to_string(r.node) + "_" + std::to_string(r.index);
    return call_result(r);
  };

  std::string main = "  func.func public @main(";
  for (size_t i = 0; i < params.size(); ++i) {
    main += (i ? ", " : "") + std::string("%a") + std::to_string(i) + ": " + params[i].mlir();
    if (i < donated.size() && donated[i]) main += " {jax.buffer_donor = true}";
  }
  std::vector<hlo::TensorType> out_types;
  for (const FusedRef& r : outputs) out_types.push_back(type_of(r));
  main += ") -> (" + types_of(out_types) + ") {\n";
  for (size_t n = 0; n < calls.size(); ++n) {
    const backend::Program& p = *calls[n].program;
    std::string lhs = "%c" + std::to_string(n);
    if (p.outputs.size() != 1) lhs += ":" + std::to_string(p.outputs.size());
    std::string args;
    for (size_t i = 0; i < calls[n].inputs.size(); ++i) {
      args += (i ? ", " : "") + name_of(calls[n].inputs[i]);
    }
    std::string results = p.outputs.size() == 1 ? p.outputs[0].mlir()
                                                 : "(" + types_of(p.outputs) + ")";
    if (p.outputs.empty()) {
      main += "    func.call @" + names[&p] + "(" + args + ") : (" + types_of(p.parameters) +
              ") -> ()\n";
      continue;
    }
    main += "    " + lhs + " = func.call @" + names[&p] + "(" + args + ") : (" +
            types_of(p.parameters) + ") -> " + results + "\n";
    if (!barrier[n]) continue;
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      FusedRef r{static_cast<int>(n), static_cast<int>(k)};
      const std::string t = p.outputs[k].mlir();
      main += "    " + name_of(r) + " = \"stablehlo.optimization_barrier\"(" + call_result(r) +
              ") : (" + t + ") -> " + t + "\n";
    }
  }
  main += "    return";
  for (size_t i = 0; i < outputs.size(); ++i) main += (i ? ", " : " ") + name_of(outputs[i]);
  if (!outputs.empty()) main += " : " + types_of(out_types);
  main += "\n  }\n";
  return "module @fused_eager {\n" + functions + main + "}\n";
}

}  // namespace torch_pjrt::eager
