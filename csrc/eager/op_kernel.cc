#include "eager/op_kernel.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <mutex>
#include <sstream>
#include <unordered_map>

#include "backend/device_storage.h"
#include "eager/execute.h"
#include "backend/generator.h"
#include "backend/runtime_state.h"
#include "eager/program_cache.h"
#include "backend/tensor_access.h"
#include "ops/dtypes.h"
#include "ops/lowering.h"

namespace torch_pjrt::backend {
namespace {

using ops::LoweringArg;
using pjrt::ElementType;

enum class Variant { kFunctional, kInPlace, kOut };

struct CallShape {
  Variant variant = Variant::kFunctional;
  size_t functional_args = 0;  // leading arguments the lowering sees
  std::vector<size_t> targets;  // written tensors: self, or the out= arguments
};

CallShape call_shape(const c10::FunctionSchema& schema) {
  CallShape shape;
  const auto& args = schema.arguments();
  shape.functional_args = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_write(args[i])) continue;
    if (args[i].kwarg_only()) {
      shape.variant = Variant::kOut;
      shape.targets.push_back(i);
      shape.functional_args = std::min(shape.functional_args, i);
    } else if (i == 0) {
      shape.variant = Variant::kInPlace;
      shape.targets.push_back(0);
    }
  }
  return shape;
}

std::string op_name(const c10::FunctionSchema& schema) {
  return schema.overload_name().empty() ? schema.name()
                                        : schema.name() + "." + schema.overload_name();
}

bool is_optional_tensor_list(const c10::TypePtr& type) {
  auto list = type->castRaw<c10::ListType>();
  if (list == nullptr) return false;
  auto opt = list->getElementType()->castRaw<c10::OptionalType>();
  return opt != nullptr && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}

// A bool (or uint8) mask in an index list becomes one long index tensor per
// mask dimension, computed on the host: its length depends on the data.
std::vector<at::Tensor> expand_mask(const at::Tensor& mask) {
  note_host_sync();
  at::Tensor positions = at::nonzero(mask.to(at::kCPU).to(at::kBool));  // [n, k]
  std::vector<at::Tensor> out;
  for (int64_t k = 0; k < mask.dim(); ++k) {
    out.push_back(positions.select(1, k).contiguous().to(mask.device()));
  }
  return out;
}

// x[mask] = v, with one boolean mask over the leading dims and one value, is
// a masked fill: no host read of the mask, no program whose shape depends
// on how many elements it selects (vocabulary-parallel embeddings do this
// on every step).
std::optional<at::Tensor> index_put_as_masked_fill(const std::string& op,
                                                   const std::vector<c10::IValue>& args) {
  bool in_place = op == "aten::index_put_" || op == "aten::_index_put_impl_";
  if (!in_place && op != "aten::index_put") return std::nullopt;
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  if (args[3].toBool() || !args[1].isList()) return std::nullopt;
  auto list = args[1].toListRef();
  if (list.size() != 1 || list[0].isNone() || !list[0].toTensor().defined()) return std::nullopt;
  at::Tensor mask = list[0].toTensor();
  if (mask.scalar_type() != at::kBool || mask.dim() > self.dim() || values.numel() != 1 ||
      values.scalar_type() != self.scalar_type() ||
      !(values.is_privateuseone() || (values.is_cpu() && values.dim() == 0)) ||
      mask.sizes() != self.sizes().slice(0, mask.dim())) {
    return std::nullopt;
  }
  if (!mask.is_privateuseone()) mask = mask.to(self.device());
  std::vector<int64_t> shape(mask.sizes().begin(), mask.sizes().end());
  shape.resize(self.dim(), 1);
  at::Tensor full = mask.reshape(shape);
  at::Tensor target = in_place ? self : self.clone();
  if (values.is_cpu()) {
    target.masked_fill_(full, values.item());  // a host number: no device read
  } else {
    target.masked_fill_(full, values.reshape({}));
  }
  return target;
}

bool is_scalar_schema(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->castRaw<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::NumberType || t->kind() == c10::TypeKind::FloatType;
}

// Static arguments go into the key as they are.
void hash_static(ProgramKey& key, const c10::IValue& v) {
  if (v.isNone()) {
    key.attr("none");
  } else if (v.isInt()) {
    key.attr("i").attr(static_cast<uint64_t>(v.toInt()));
  } else if (v.isBool()) {
    key.attr("b").attr(static_cast<uint64_t>(v.toBool()));
  } else if (v.isDouble()) {
    double d = v.toDouble();
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    key.attr("d").attr(bits);
  } else if (v.isScalar()) {
    c10::Scalar s = v.toScalar();
    double d = s.toDouble();
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    key.attr("s").attr(static_cast<uint64_t>(s.type())).attr(bits);
  } else if (v.isIntList()) {
    key.attr("l");
    for (int64_t x : v.toIntVector()) key.attr(static_cast<uint64_t>(x));
  } else if (v.isString()) {
    key.attr("str").attr(v.toStringRef());
  } else if (v.isList()) {
    key.attr("list");
    for (const c10::IValue& e : v.toListRef()) hash_static(key, e);
  } else if (v.isDevice()) {
    key.attr("dev");
  } else {
    key.attr(v.tagKind());
  }
}

// One call being prepared: the key, the lowering arguments' skeleton and the
// buffers to pass, in parameter order.
struct PreparedCall {
  ProgramKey key;
  std::vector<LoweringArg> args;
  std::vector<hlo::TensorType> param_types;   // as declared to the program
  std::vector<std::vector<int64_t>> logical;  // torch sizes of each parameter
  // Per parameter: read as a transpose of a whole buffer (empty: reshape).
  std::vector<std::optional<PermutedView>> permuted;
  std::vector<BufferPtr> inputs;
  int device = -1;
  explicit PreparedCall(const std::string& op) : key(op) {}
};

[[noreturn]] void device_mismatch(const std::string& op, const at::Tensor& a, int device) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                     "devices, ", a.device(), " and tpu:", device, "! (when checking arguments for ",
              op, ")");
}

void add_tensor_param(PreparedCall& call, const at::Tensor& t) {
  // A transposed or permuted whole tensor (Linear's weight.t()) is read
  // inside the op's own program: no separate view program, no copy.
  storage_buffer_for(t);
  if (auto view = whole_buffer_permutation(t)) {
    BufferPtr buffer = storage_slot(t.storage()).buffer;
    hlo::TensorType type{buffer->element_type(), buffer->dims()};
    call.key.dtype(static_cast<int64_t>(type.type)).shape(type.dims).shape(t.sizes());
    call.key.shape(c10::IntArrayRef(view->permutation));
    call.param_types.push_back(type);
    call.logical.emplace_back(t.sizes().begin(), t.sizes().end());
    call.permuted.push_back(std::move(view));
    call.inputs.push_back(std::move(buffer));
    return;
  }
  BufferPtr buffer = buffer_for_read(t);
  hlo::TensorType type{buffer->element_type(), buffer->dims()};
  call.key.dtype(static_cast<int64_t>(type.type)).shape(type.dims).shape(t.sizes());
  call.param_types.push_back(type);
  call.logical.emplace_back(t.sizes().begin(), t.sizes().end());
  call.permuted.emplace_back();
  call.inputs.push_back(std::move(buffer));
}

void add_scalar_param(PreparedCall& call, ElementType type, double value, int64_t int_value,
                      bool integral) {
  call.key.dtype(1000 + static_cast<int64_t>(type));
  call.param_types.push_back(hlo::TensorType{type, {}});
  call.logical.emplace_back();
  call.permuted.emplace_back();
  call.inputs.push_back(integral ? scalar_buffer_int(call.device, type, int_value)
                                 : scalar_buffer(call.device, type, value));
}

void add_complex_param(PreparedCall& call, ElementType type, double re, double im) {
  call.key.dtype(1000 + static_cast<int64_t>(type));
  call.param_types.push_back(hlo::TensorType{type, {}});
  call.logical.emplace_back();
  call.permuted.emplace_back();
  call.inputs.push_back(scalar_buffer_complex(call.device, type, re, im));
}

int find_device(const std::string& op, const std::vector<c10::IValue>& args) {
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      return v.toTensor().device().index();
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        if (t.defined() && t.is_privateuseone()) return t.device().index();
      }
    }
  }
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
}

void check_device(const std::string& op, const at::Tensor& t, int device) {
  if (!t.is_privateuseone() || t.device().index() != device) device_mismatch(op, t, device);
}

bool wants_f64(const std::vector<c10::IValue>& args) {
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == at::kDouble) {
      return true;
    }
  }
  return false;
}

PreparedCall prepare(const std::string& op, const ops::Lowering& lowering,
                     const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                     size_t count) {
  PreparedCall call(lowering.op);
  call.device = find_device(op, args);
  bool f64 = wants_f64(args);
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& v = args[i];
    const c10::Argument& formal = schema.arguments()[i];
    LoweringArg a;
    // Dtypes, shapes and attributes are hashed in separate streams; this tag
    // keeps each argument's kind at its position in the key, so clamp(x,
    // min, None) and clamp(x, None, max) never share a program.
    call.key.attr(static_cast<uint64_t>(v.tagKind().size()) * 1000003u + i).attr(v.tagKind());
    bool static_scalar = std::find(lowering.static_scalars.begin(), lowering.static_scalars.end(),
                                   static_cast<int>(i)) != lowering.static_scalars.end();
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        call.key.attr("undef");
      } else if (!t.is_privateuseone() && t.dim() == 0) {
        // A 0-d CPU tensor next to device tensors: a number, as in torch.
        a.kind = LoweringArg::Kind::kScalar;
        a.dtype = t.scalar_type();
        a.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
        ElementType type = ops::to_element_type(t.scalar_type());
        call.key.attr(a.wrapped_number);
        c10::Scalar s = t.item();
        if (s.isComplex()) {
          c10::complex<double> z = s.toComplexDouble();
          add_complex_param(call, type, z.real(), z.imag());
        } else {
          add_scalar_param(call, type, s.toDouble(), s.isIntegral(true) ? s.toLong() : 0,
                           !hlo::is_float(type));
        }
      } else {
        check_device(op, t, call.device);
        a.kind = LoweringArg::Kind::kTensor;
        a.dtype = t.scalar_type();
        bool shape_only = std::find(lowering.shape_only.begin(), lowering.shape_only.end(),
                                    static_cast<int>(i)) != lowering.shape_only.end();
        if (shape_only) {
          a.placeholder = true;
          a.placeholder_dims.assign(t.sizes().begin(), t.sizes().end());
          call.key.attr("shape_only").dtype(static_cast<int64_t>(t.scalar_type())).shape(t.sizes());
        } else {
          add_tensor_param(call, t);
        }
      }
    } else if (v.isTensorList()) {
      a.kind = LoweringArg::Kind::kTensorList;
      call.key.attr("list").attr(static_cast<uint64_t>(v.toTensorVector().size()));
      for (const at::Tensor& t : v.toTensorVector()) {
        check_device(op, t, call.device);
        a.dtypes.push_back(t.scalar_type());
        add_tensor_param(call, t);
      }
    } else if (v.isList() && is_optional_tensor_list(formal.type())) {
      a.kind = LoweringArg::Kind::kTensorList;
      std::vector<c10::optional<at::Tensor>> entries;
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isNone() || !e.toTensor().defined()) {
          entries.emplace_back();
        } else if (e.toTensor().scalar_type() == at::kBool || e.toTensor().scalar_type() == at::kByte) {
          for (at::Tensor& index : expand_mask(e.toTensor())) entries.emplace_back(index);
        } else {
          entries.emplace_back(e.toTensor());
        }
      }
      call.key.attr("optional_list").attr(static_cast<uint64_t>(entries.size()));
      for (auto& e : entries) {
        a.present.push_back(e.has_value());
        a.dtypes.push_back(e ? e->scalar_type() : at::kLong);
        if (!e) {
          call.key.attr("none");
          continue;
        }
        // Index tensors may live on the CPU, as CUDA allows for advanced
        // indexing and index_put: they are copied to the device.
        if (e->is_cpu()) e = e->to(c10::Device(c10::DeviceType::PrivateUse1, call.device));
        check_device(op, *e, call.device);
        add_tensor_param(call, *e);
      }
    } else if (v.isNone()) {
      call.key.attr("none");
    } else if (is_scalar_schema(formal.type()) && !static_scalar && (v.isScalar())) {
      c10::Scalar s = v.toScalar();
      a.kind = LoweringArg::Kind::kScalar;
      a.wrapped_number = true;
      if (s.isComplex()) {
        // A complex Python number: complex128 where float64 is in play,
        // else complex64 (the type torch's promotion then narrows to).
        a.dtype = at::kComplexDouble;
        c10::complex<double> z = s.toComplexDouble();
        add_complex_param(call, f64 ? ElementType::kC128 : ElementType::kC64, z.real(), z.imag());
      } else if (s.isBoolean()) {
        a.dtype = at::kBool;
        add_scalar_param(call, ElementType::kPred, 0, s.toBool(), true);
      } else if (s.isIntegral(false)) {
        a.dtype = at::kLong;
        add_scalar_param(call, ElementType::kS64, 0, s.toLong(), true);
      } else {
        a.dtype = at::kDouble;
        add_scalar_param(call, f64 ? ElementType::kF64 : ElementType::kF32, s.toDouble(), 0,
                         false);
      }
      const auto& special = lowering.special_scalar;
      if (special && special->arg == static_cast<int>(i) && special->is_special(s)) {
        a.value = v;  // the lowering may specialise the program to it: keyed
        call.key.attr("special");
        hash_static(call.key, v);
      }
    } else {
      a.kind = LoweringArg::Kind::kStatic;
      a.value = v;
      hash_static(call.key, v);
    }
    call.args.push_back(std::move(a));
  }
  return call;
}

std::string describe_inputs(const std::vector<c10::IValue>& args, size_t count) {
  std::ostringstream out;
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& v = args[i];
    if (i) out << ", ";
    if (v.isTensor() && v.toTensor().defined()) {
      out << v.toTensor().scalar_type() << v.toTensor().sizes();
    } else {
      out << v;
    }
  }
  return out.str();
}

// Which outputs of a program are data checks, remembered from its build
// (a cache hit does not run the lowering again).
struct ProgramChecks {
  size_t first = 0;
  std::vector<std::string> messages;
};

const ProgramChecks& checks_of(const Program& program, size_t num_results,
                               const std::vector<std::string>& fresh_messages) {
  static std::mutex mutex;
  static auto* known = new std::unordered_map<const Program*, ProgramChecks>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known->find(&program);
  if (it == known->end()) {
    // First sight of this program in this process: the build just ran (or
    // the program came from another op's identical key, never with checks
    // unless the lowering produced them).
    size_t first = fresh_messages.empty() ? program.outputs.size() : num_results;
    it = known->emplace(&program, ProgramChecks{first, fresh_messages}).first;
  }
  return it->second;
}

// What a call needs from its schema, worked out once per operator: the
// name, the lowering and the argument layout (a hot-path lookup by string
// and a vector allocation per call otherwise).
struct KnownOp {
  std::string name;
  const ops::Lowering* lowering = nullptr;
  CallShape shape;
};

const KnownOp& known_op(const c10::FunctionSchema& schema) {
  static std::mutex mutex;
  static auto* known = new std::unordered_map<const c10::FunctionSchema*, KnownOp>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known->find(&schema);
  if (it != known->end()) return it->second;
  KnownOp entry;
  entry.name = op_name(schema);
  entry.lowering = ops::find_lowering(entry.name);
  TORCH_INTERNAL_ASSERT(entry.lowering != nullptr, "torch_pjrt: no lowering for ", entry.name);
  entry.shape = call_shape(schema);
  return known->emplace(&schema, std::move(entry)).first->second;
}

}  // namespace

void run_lowered_op(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = handle.schema();
  const KnownOp& known = known_op(schema);
  const std::string& op = known.name;
  const ops::Lowering* lowering = known.lowering;
  const CallShape& shape = known.shape;
  size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args(stack->end() - nargs, stack->end());
  torch::jit::drop(*stack, nargs);
  // Ops torch lets through its conjugate and negative views unresolved (mm,
  // bmm, addmm, dot ... take them on CUDA's BLAS flags) read the values
  // those views stand for: resolve them first. Written arguments keep theirs.
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    if (args[i].isTensor()) {
      const at::Tensor& t = args[i].toTensor();
      if (t.defined() && (t.is_conj() || t.is_neg())) args[i] = t.resolve_conj().resolve_neg();
    }
  }
  if (std::optional<at::Tensor> filled = index_put_as_masked_fill(op, args)) {
    torch::jit::push(*stack, *filled);
    return;
  }

  PreparedCall call = prepare(op, *lowering, schema, args, shape.functional_args);
  // In-place and out= results are converted in the program to their
  // targets' dtypes; the targets' dtypes are part of the key.
  std::vector<c10::ScalarType> target_dtypes;
  for (size_t t : shape.targets) {
    const at::Tensor& target = args[t].toTensor();
    check_device(op, target, call.device);
    target_dtypes.push_back(target.scalar_type());
    call.key.attr("target").attr(static_cast<uint64_t>(target.scalar_type()));
  }

  // An in-place op on a whole tensor gives its old buffer to the program
  // (donation) when nothing but the storage holds it, so updating a large
  // parameter needs no second copy of it.
  bool donate_self = false;
  if (shape.variant == Variant::kInPlace && !call.inputs.empty() &&
      call.args[0].kind == LoweringArg::Kind::kTensor && !call.args[0].placeholder &&
      !call.permuted[0]) {
    const at::Tensor& self = args[0].toTensor();
    donate_self = storage_slot(self.storage()).buffer == call.inputs[0] && is_whole_buffer(self);
  }
  call.key.attr(donate_self ? "donate_self" : "keep_self");

  // Random ops get the generator's (seed, offset) as their last parameter;
  // the offset advances per call, so every call draws fresh numbers and a
  // seed replays them.
  bool random = lowering->random;
  if (random) {
    at::Generator gen;
    for (size_t i = 0; i < shape.functional_args; ++i) {
      if (args[i].isGenerator() && args[i].toGenerator().defined()) gen = args[i].toGenerator();
    }
    if (!gen.defined()) gen = default_generator(static_cast<c10::DeviceIndex>(call.device));
    call.inputs.push_back(take_generator_state(gen, call.device));
    call.param_types.push_back(hlo::TensorType{ElementType::kU64, {2}});
    call.logical.push_back({2});
    call.permuted.emplace_back();
    call.key.attr("random");
  }

  const Program* program = nullptr;
  size_t num_results = 0;
  std::vector<std::string> check_messages;
  try {
    program = &program_for(call.key, [&](hlo::Builder& b) {
      std::vector<hlo::Value> params;
      for (size_t p = 0; p < call.param_types.size(); ++p) {
        params.push_back(b.parameter(call.param_types[p], donate_self && p == 0));
      }
      for (size_t p = 0; p < params.size(); ++p) {
        if (const auto& view = call.permuted[p]) {
          params[p] = b.transpose(b.reshape(params[p], view->contiguous_sizes), view->permutation);
        }
      }
      size_t next = 0;
      for (auto& a : call.args) {
        if (a.placeholder) {
          a.tensor = b.zeros(hlo::TensorType{ops::to_element_type(a.dtype), a.placeholder_dims});
        } else if (a.kind == LoweringArg::Kind::kTensor || a.kind == LoweringArg::Kind::kScalar) {
          a.tensor = b.reshape(params[next], call.logical[next]);
          ++next;
        } else if (a.kind == LoweringArg::Kind::kTensorList) {
          for (size_t k = 0; k < a.dtypes.size(); ++k) {
            if (!a.present.empty() && !a.present[k]) {
              a.tensors.emplace_back();  // None
              continue;
            }
            a.tensors.push_back(b.reshape(params[next], call.logical[next]));
            ++next;
          }
        }
      }
      ops::LoweringContext ctx(b, lowering->op, call.args);
      ctx.set_out_dtypes(target_dtypes);
      if (random) ctx.set_rng_state(params.back());
      std::vector<hlo::Value> results = lowering->fn(ctx);
      num_results = results.size();
      check_messages = ctx.check_messages();
      // Factories (arange, eye: no tensor inputs) produce their out= dtype
      // by definition; computations must not narrow a float into an int.
      bool factory = call.param_types.empty() ||
                     std::all_of(call.args.begin(), call.args.end(), [](const LoweringArg& a) {
                       return a.kind != LoweringArg::Kind::kTensor &&
                              a.kind != LoweringArg::Kind::kTensorList;
                     });
      for (size_t i = 0; i < target_dtypes.size() && i < results.size(); ++i) {
        c10::ScalarType from = ops::to_scalar_type(b.element_type(results[i]));
        TORCH_CHECK(factory || c10::canCast(from, target_dtypes[i]), "result type ", from,
                    " can't be cast to the desired output type ", target_dtypes[i]);
        results[i] = b.convert(results[i], ops::to_element_type(target_dtypes[i]));
      }
      // Data checks ride along as extra i1 outputs after the results.
      std::vector<hlo::Value> outputs = results;
      for (hlo::Value ok : ctx.checks()) outputs.push_back(ok);
      b.set_outputs(outputs);
    });
  } catch (const hlo::BuildError& e) {
    TORCH_CHECK(false, "torch_pjrt: lowering ", op, " (", describe_inputs(args, shape.functional_args),
                ") produced an invalid program: ", e.what());
  }

  std::vector<bool> may_donate;
  if (donate_self) {
    // The storage and call.inputs hold the buffer; no one else may.
    may_donate.assign(call.inputs.size(), false);
    may_donate[0] = call.inputs[0].use_count() == 2;
  }
  std::vector<BufferPtr> outputs;
  try {
    outputs = run_program(*program, call.inputs, call.device, may_donate);
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torch_pjrt: ", op, " (", describe_inputs(args, shape.functional_args),
                ") failed on the device: ", e.what());
  }

  const auto& checks = checks_of(*program, num_results, check_messages);
  for (size_t c = 0; c < checks.messages.size(); ++c) {
    const std::string& tagged = checks.messages[c];
    defer_check(outputs[checks.first + c], "torch_pjrt: " + op + ": " + tagged.substr(1),
                tagged[0] == 'I');
  }
  outputs.resize(checks.first);

  // Arguments the op updates without saying so in its schema come last.
  std::vector<at::Tensor> mutated;
  for (int i : lowering->mutated_args) {
    if (args[i].isTensor() && args[i].toTensor().defined()) mutated.push_back(args[i].toTensor());
  }
  for (size_t m = 0; m < mutated.size(); ++m) {
    write_tensor(mutated[m], outputs[outputs.size() - mutated.size() + m]);
  }
  outputs.resize(outputs.size() - mutated.size());

  if (shape.variant == Variant::kFunctional) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const hlo::TensorType& type = program->outputs[i];
      torch::jit::push(*stack, wrap_buffer(outputs[i], ops::to_scalar_type(type.type), type.dims,
                                           call.device));
    }
    return;
  }
  for (size_t i = 0; i < shape.targets.size(); ++i) {
    at::Tensor target = args[shape.targets[i]].toTensor();
    const auto& dims = program->outputs[i].dims;
    if (shape.variant == Variant::kInPlace) {
      TORCH_CHECK(target.sizes() == c10::IntArrayRef(dims), "output with shape ", target.sizes(),
                  " doesn't match the broadcast shape ", c10::IntArrayRef(dims));
    } else {
      at::native::resize_output(target, dims);
    }
    write_tensor(target, outputs[i]);
    torch::jit::push(*stack, target);
  }
}

void register_lowered_ops() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const std::string& name : ops::lowered_ops()) {
    library->impl(name.substr(6).c_str(),  // without "aten::"
                  torch::CppFunction::makeFromBoxedFunction<&run_lowered_op>());
  }
}

}  // namespace torch_pjrt::backend
