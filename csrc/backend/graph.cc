// Compiled graphs (torch.compile(backend="tpu")): one StableHLO program per
// FX graph, built node by node from the same lowering table eager mode uses,
// and run as one executable. Python walks the FX graph (shapes concrete,
// symbols resolved) and hands over a flat node list; this file turns each
// node's arguments into LoweringArgs by the op's schema, runs the lowerings,
// compiles through the program cache (so memory and disk caches apply), and
// runs the program with input mutations written back to their tensors, the
// old buffers donated when nothing else holds them.
#include "backend/graph.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <sstream>

#include "backend/device_storage.h"
#include "backend/generator.h"
#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "backend/tensor_access.h"
#include "eager/execute.h"
#include "eager/op_kernel.h"
#include "eager/pending_graph.h"
#include "eager/program_cache.h"
#include "eager/shared_trig.h"
#include "ops/dtypes.h"
#include "ops/lowering.h"

namespace py = pybind11;

namespace torch_pjrt::backend {
namespace {

using ops::LoweringArg;
using pjrt::ElementType;

struct GraphValue {
  hlo::Value value;
  c10::ScalarType dtype;
};

const c10::FunctionSchema& schema_of(const std::string& op) {
  auto dot = op.find('.', op.find("::"));
  std::string name = dot == std::string::npos ? op : op.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str()).schema();
}

c10::TypePtr unwrap_optional(const c10::TypePtr& type) {
  if (auto opt = type->castRaw<c10::OptionalType>()) return opt->getElementType();
  return type;
}

bool is_tensor_type(const c10::TypePtr& type) {
  return unwrap_optional(type)->kind() == c10::TypeKind::TensorType;
}

bool is_tensor_list_type(const c10::TypePtr& type) {
  auto list = unwrap_optional(type)->castRaw<c10::ListType>();
  return list != nullptr && is_tensor_type(list->getElementType());
}

bool is_number_type(const c10::TypePtr& type) {
  auto kind = unwrap_optional(type)->kind();
  return kind == c10::TypeKind::NumberType || kind == c10::TypeKind::FloatType;
}

// The graph nodes an argument reads (graph inputs are left out).
void collect_refs(py::handle obj, std::vector<int>& out) {
  if (py::isinstance<GraphRef>(obj)) {
    int node = obj.cast<GraphRef>().node;
    if (node >= 0) out.push_back(node);
  } else if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    for (py::handle e : obj) collect_refs(e, out);
  }
}

// Per node: whether its results pass through an optimization barrier
// (eager/shared_trig.h).
std::vector<bool> shared_trig_nodes(const std::vector<GraphNode>& nodes) {
  if (!eager::shares_trig_values()) return std::vector<bool>(nodes.size(), false);
  std::vector<eager::ProgramOp> ops(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    ops[n].op = nodes[n].op;
    collect_refs(nodes[n].args, ops[n].inputs);
    for (auto item : nodes[n].kwargs) collect_refs(item.second, ops[n].inputs);
  }
  return eager::trig_values_to_share(ops);
}

class GraphBuild {
 public:
  GraphBuild(hlo::Builder& b, const std::vector<GraphInput>& inputs, bool random, bool f64)
      : b_(b), f64_(f64) {
    for (const auto& in : inputs) {
      hlo::Value p = b.parameter({ops::to_element_type(in.dtype), in.shape}, in.donate);
      inputs_.push_back({p, in.dtype});
    }
    if (random) rng_ = b.parameter({ElementType::kU64, {2}});
  }

  const GraphValue& ref(const GraphRef& r) const {
    if (r.node < 0) {
      size_t i = static_cast<size_t>(-1 - r.node);
      TORCH_INTERNAL_ASSERT(i < inputs_.size(), "torch_pjrt: graph input ", i, " out of range");
      return inputs_[i];
    }
    TORCH_INTERNAL_ASSERT(static_cast<size_t>(r.node) < nodes_.size() &&
                              static_cast<size_t>(r.output) < nodes_[r.node].size(),
                          "torch_pjrt: graph reference ", r.node, ":", r.output, " out of range");
    return nodes_[r.node][r.output];
  }

  LoweringArg scalar_constant(py::handle obj) {
    LoweringArg a;
    a.kind = LoweringArg::Kind::kScalar;
    a.wrapped_number = true;
    if (py::isinstance<py::bool_>(obj)) {
      a.dtype = at::kBool;
      a.tensor = b_.constant_bool(obj.cast<bool>());
    } else if (py::isinstance<py::int_>(obj)) {
      a.dtype = at::kLong;
      a.tensor = b_.constant_int(obj.cast<int64_t>(), ElementType::kS64);
    } else {
      a.dtype = at::kDouble;
      a.tensor = b_.constant(obj.cast<double>(), f64_ ? ElementType::kF64 : ElementType::kF32);
    }
    return a;
  }

  LoweringArg convert_arg(const std::string& op, const c10::Argument& formal, py::handle obj,
                          bool static_scalar) {
    const c10::TypePtr& type = formal.type();
    if (py::isinstance<GraphRef>(obj)) {
      const GraphValue& v = ref(obj.cast<GraphRef>());
      return ops::tensor_arg(v.value, v.dtype);
    }
    if (obj.is_none()) return ops::static_arg(c10::IValue());
    if (is_tensor_list_type(type)) {
      LoweringArg a;
      a.kind = LoweringArg::Kind::kTensorList;
      bool optional_elems = unwrap_optional(type)->castRaw<c10::ListType>()->getElementType()->kind() ==
                            c10::TypeKind::OptionalType;
      for (py::handle e : obj) {
        if (e.is_none()) {
          a.tensors.emplace_back();
          a.dtypes.push_back(at::kLong);
          a.present.push_back(false);
          continue;
        }
        TORCH_CHECK(py::isinstance<GraphRef>(e), "torch_pjrt: ", op, ": argument '", formal.name(),
                    "' holds something other than graph tensors");
        const GraphValue& v = ref(e.cast<GraphRef>());
        a.tensors.push_back(v.value);
        a.dtypes.push_back(v.dtype);
        a.present.push_back(true);
      }
      if (!optional_elems) a.present.clear();
      return a;
    }
    bool number = py::isinstance<py::int_>(obj) || py::isinstance<py::float_>(obj);
    if (number && is_tensor_type(type)) return scalar_constant(obj);
    if (number && is_number_type(type) && !static_scalar) return scalar_constant(obj);
    return ops::static_arg(torch::jit::toIValue(obj, type));
  }

  void add_node(const GraphNode& node, bool share) {
    const ops::Lowering* lowering = ops::find_lowering(node.op);
    TORCH_CHECK(lowering != nullptr, "torch_pjrt: no lowering for ", node.op);
    const c10::FunctionSchema& schema = schema_of(node.op);
    std::vector<LoweringArg> args;
    const auto& formals = schema.arguments();
    for (size_t i = 0; i < formals.size(); ++i) {
      const c10::Argument& formal = formals[i];
      if (is_write(formal) && formal.kwarg_only()) break;  // out= arguments
      py::object obj = py::none();
      if (i < node.args.size()) {
        obj = node.args[i];
      } else if (node.kwargs.contains(formal.name().c_str())) {
        obj = node.kwargs[formal.name().c_str()];
      } else if (formal.default_value()) {
        obj = torch::jit::toPyObject(*formal.default_value());
      }
      bool static_scalar = std::find(lowering->static_scalars.begin(), lowering->static_scalars.end(),
                                     static_cast<int>(i)) != lowering->static_scalars.end();
      args.push_back(convert_arg(node.op, formal, obj, static_scalar));
      const auto& special = lowering->special_scalar;
      if (special && special->arg == static_cast<int>(i) &&
          args.back().kind == LoweringArg::Kind::kScalar && !py::isinstance<py::bool_>(obj) &&
          (py::isinstance<py::int_>(obj) || py::isinstance<py::float_>(obj))) {
        c10::Scalar s = py::isinstance<py::int_>(obj) ? c10::Scalar(obj.cast<int64_t>())
                                                      : c10::Scalar(obj.cast<double>());
        if (special->is_special(s)) args.back().value = s;  // a constant here anyway
      }
    }
    ops::LoweringContext ctx(b_, lowering->op, std::move(args));
    ctx.set_meta_layout(true);
    if (lowering->random) {
      TORCH_INTERNAL_ASSERT(rng_.valid(), "torch_pjrt: graph has a random op but no generator state");
      ctx.set_rng_state(rng_);
    }
    std::vector<hlo::Value> results = lowering->fn(ctx);
    if (lowering->random) rng_ = ctx.rng_state();
    for (size_t c = 0; c < ctx.checks().size(); ++c) {
      checks_.push_back(ctx.checks()[c]);
      check_messages_.push_back(ctx.check_messages()[c].substr(0, 1) + node.op + ": " +
                                ctx.check_messages()[c].substr(1));
    }
    std::vector<GraphValue> values;
    for (size_t k = 0; k < results.size(); ++k) {
      hlo::Value v = results[k];
      if (share) v = b_.unary("optimization_barrier", v);
      c10::ScalarType dtype = ops::to_scalar_type(b_.element_type(v));
      if (k < node.expected.size() && node.expected[k].dtype) {
        const auto& want = node.expected[k];
        // A lowering's result must be what torch says the op returns; a
        // difference is a lowering bug, reported rather than run.
        TORCH_CHECK(b_.dims(v) == want.shape && dtype == *want.dtype, "torch_pjrt: the lowering of ",
                    node.op, " produced ", dtype, c10::IntArrayRef(b_.dims(v)), " for output ", k,
                    " where torch expects ", *want.dtype, c10::IntArrayRef(want.shape));
        dtype = *want.dtype;
      }
      values.push_back({v, dtype});
    }
    nodes_.push_back(std::move(values));
  }

  std::vector<hlo::Value> outputs(const std::vector<GraphRef>& refs) const {
    std::vector<hlo::Value> out;
    for (const GraphRef& r : refs) out.push_back(ref(r).value);
    return out;
  }
  const std::vector<hlo::Value>& checks() const { return checks_; }
  const std::vector<std::string>& check_messages() const { return check_messages_; }

 private:
  hlo::Builder& b_;
  bool f64_;
  std::vector<GraphValue> inputs_;
  std::vector<std::vector<GraphValue>> nodes_;
  hlo::Value rng_;
  std::vector<hlo::Value> checks_;
  std::vector<std::string> check_messages_;
};

}  // namespace

std::shared_ptr<GraphProgram> compile_graph(const std::string& name, const std::string& key,
                                            const std::string& reason,
                                            const std::vector<GraphInput>& inputs,
                                            const std::vector<GraphNode>& nodes,
                                            const std::vector<GraphRef>& outputs) {
  // Random ops share one generator state parameter, threaded through them
  // in order; each run advances the generator's offset once.
  bool random = std::any_of(nodes.begin(), nodes.end(), [](const GraphNode& node) {
    const ops::Lowering* lowering = ops::find_lowering(node.op);
    return lowering != nullptr && lowering->random;
  });
  ProgramKey pkey("graph:" + name);
  pkey.attr(key);
  for (const auto& in : inputs) {
    pkey.dtype(static_cast<int64_t>(in.dtype)).shape(c10::IntArrayRef(in.shape));
    pkey.attr(static_cast<uint64_t>(in.donate));
  }
  pkey.attr(static_cast<uint64_t>(random));
  if (!reason.empty()) pkey.reason(reason);
  bool f64 = std::any_of(inputs.begin(), inputs.end(),
                         [](const GraphInput& in) { return in.dtype == at::kDouble; });
  auto graph = std::make_shared<GraphProgram>();
  graph->num_results = outputs.size();
  graph->random = random;
  graph->inputs = inputs;
  bool built = false;
  try {
    graph->program = &program_for(pkey, [&](hlo::Builder& b) {
      GraphBuild build(b, inputs, random, f64);
      std::vector<bool> share = shared_trig_nodes(nodes);
      for (size_t n = 0; n < nodes.size(); ++n) build.add_node(nodes[n], share[n]);
      std::vector<hlo::Value> outs = build.outputs(outputs);
      // The graph's data checks travel as one pred[N] output: one buffer to
      // read at the next host wait, however many checks the graph has.
      if (!build.checks().empty()) {
        std::vector<hlo::Value> flags;
        for (hlo::Value ok : build.checks()) flags.push_back(b.reshape(ok, {1}));
        outs.push_back(flags.size() == 1 ? flags[0] : b.concatenate(flags, 0));
      }
      b.set_outputs(outs);
      if (!build.check_messages().empty()) {
        auto meaning = std::make_shared<CheckMessages>();
        for (const std::string& tagged : build.check_messages()) {
          meaning->messages.push_back("torch_pjrt: " + tagged.substr(1));
          meaning->index_errors.push_back(tagged[0] == 'I');
        }
        graph->checks = std::move(meaning);
      }
      built = true;
    });
  } catch (const hlo::BuildError& e) {
    TORCH_CHECK(false, "torch_pjrt: graph ", name, " produced an invalid program: ", e.what());
  }
  // Debug eager runs each graph alone, compiled now: the compile is timed
  // and reported with the graph. Otherwise a graph runs inside the device's
  // pending graph (run_graph), which compiles what it runs as one program.
  if (settings().eager == EagerMode::kDebug) {
    graph->program->executable();
  } else if (built) {
    note_compile_reason(graph->program->reason());
  }
  // The same key always builds the same program, checks included; a hit
  // in this process's program cache reuses what the first build recorded.
  static std::mutex mutex;
  static auto* known =
      new std::unordered_map<const Program*, std::shared_ptr<const CheckMessages>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (built) {
    (*known)[graph->program] = graph->checks;
  } else if (auto it = known->find(graph->program); it != known->end()) {
    graph->checks = it->second;
  }
  return graph;
}

std::vector<c10::optional<at::Tensor>> run_graph(const GraphProgram& graph,
                                                 const std::vector<at::Tensor>& args, int device,
                                                 const std::vector<std::pair<int, int>>& mutations) {
  const Program& program = *graph.program;
  TORCH_CHECK(args.size() == graph.inputs.size(), "torch_pjrt: compiled graph expects ",
              graph.inputs.size(), " inputs, got ", args.size());
  std::vector<BufferPtr> buffers;
  for (size_t i = 0; i < args.size(); ++i) {
    at::Tensor t = args[i];
    const GraphInput& want = graph.inputs[i];
    TORCH_CHECK(t.scalar_type() == want.dtype && t.sizes() == c10::IntArrayRef(want.shape),
                "torch_pjrt: compiled graph input ", i, " is ", t.scalar_type(), t.sizes(),
                " but the program was compiled for ", want.dtype, c10::IntArrayRef(want.shape));
    if (!t.is_privateuseone()) {
      // A CPU scalar (a step count, a learning rate) rides along as a copy.
      t = t.to(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
    } else {
      TORCH_CHECK(t.device().index() == device, "Expected all tensors to be on the same device, but "
                  "found at least two devices, ", t.device(), " and tpu:", device,
                  "! (when checking arguments for a compiled graph)");
    }
    buffers.push_back(read_tensor(t));
  }
  // Debug mode runs the graph alone, now; otherwise it joins the pending
  // graph, which donates whatever parameter only it still holds.
  const bool alone = settings().eager == EagerMode::kDebug;
  std::vector<bool> may_donate(buffers.size(), false);
  for (const auto& [input, result] : mutations) {
    (void)result;
    const at::Tensor& t = args[input];
    // The graph walk never lowers a write into a CPU tensor (that node runs
    // eagerly), so every mutated input is a device tensor.
    TORCH_CHECK(t.is_privateuseone(), "torch_pjrt: compiled graph input ", input,
                " is written by the graph but lives on ", t.device());
    if (!alone || !graph.inputs[input].donate || !is_whole_buffer(t)) continue;
    // Only the storage and `buffers` may hold it; then the program may
    // consume it, and the storage gets the updated buffer below.
    may_donate[input] = storage_slot(t.storage()).buffer == buffers[input] &&
                        buffers[input].use_count() == 2;
  }
  if (graph.random) {
    buffers.push_back(
        take_generator_state(default_generator(static_cast<c10::DeviceIndex>(device)), device));
    may_donate.push_back(false);
  }
  std::vector<BufferPtr> outputs =
      alone ? run_program(program, buffers, device, may_donate, /*fusable=*/false)
            : eager::record(program, buffers, device, /*compiled_graph=*/true);
  buffers.clear();
  if (graph.checks) defer_checks(outputs[graph.num_results], graph.checks);
  std::vector<c10::optional<at::Tensor>> results(graph.num_results);
  std::vector<bool> written(graph.num_results, false);
  for (const auto& [input, result] : mutations) {
    write_tensor(args[input], outputs[result]);
    written[result] = true;
  }
  for (size_t i = 0; i < graph.num_results; ++i) {
    if (written[i]) continue;
    const hlo::TensorType& type = program.outputs[i];
    results[i] = wrap_buffer(outputs[i], ops::to_scalar_type(type.type), type.dims, device);
  }
  return results;
}

}  // namespace torch_pjrt::backend
