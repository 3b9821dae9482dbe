#include "ops/lowering.h"

#include <c10/util/Exception.h>

#include <map>
#include <memory>
#include <mutex>

#include "ops/dtypes.h"

namespace torch_pjrt::ops {
namespace {

struct Registry {
  std::map<std::string, std::shared_ptr<Lowering>> by_name;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

}  // namespace

void register_lowering(const std::string& op, LoweringFn fn, std::vector<std::string> aliases,
                       std::vector<int> static_scalars, std::vector<int> shape_only,
                       bool random, std::vector<int> mutated_args) {
  auto lowering = std::make_shared<Lowering>(Lowering{op, std::move(fn), std::move(static_scalars),
                                                      std::move(shape_only), random,
                                                      std::move(mutated_args)});
  auto& names = registry().by_name;
  TORCH_INTERNAL_ASSERT(!names.count(op), "torch_pjrt: two lowerings for ", op);
  names[op] = lowering;
  for (const auto& alias : aliases) {
    TORCH_INTERNAL_ASSERT(!names.count(alias), "torch_pjrt: two lowerings for ", alias);
    names[alias] = lowering;
  }
}

void register_graph_lowering(const std::string& op, LoweringFn fn,
                             std::vector<std::string> aliases, bool random,
                             std::vector<int> static_scalars) {
  register_lowering(op, std::move(fn), aliases, std::move(static_scalars), {}, random, {});
  auto& names = registry().by_name;
  names[op]->graph_only = true;
}

void specialize_scalar(const std::string& op, int arg, bool (*is_special)(const c10::Scalar&)) {
  auto& names = registry().by_name;
  auto it = names.find(op);
  TORCH_INTERNAL_ASSERT(it != names.end(), "torch_pjrt: no lowering for ", op, " to specialise");
  it->second->special_scalar = Lowering::SpecialScalar{arg, is_special};
}

LoweringArg tensor_arg(Value v, c10::ScalarType dtype) {
  LoweringArg a;
  a.kind = LoweringArg::Kind::kTensor;
  a.tensor = v;
  a.dtype = dtype;
  return a;
}

LoweringArg static_arg(c10::IValue v) {
  LoweringArg a;
  a.kind = v.isNone() ? LoweringArg::Kind::kNone : LoweringArg::Kind::kStatic;
  a.value = std::move(v);
  return a;
}

std::vector<Value> delegate(LoweringContext& ctx, const std::string& op,
                            std::vector<LoweringArg> args) {
  const Lowering* lowering = find_lowering(op);
  TORCH_INTERNAL_ASSERT(lowering != nullptr, "torch_pjrt: no lowering for ", op);
  LoweringContext inner(ctx.b, lowering->op, std::move(args));
  inner.set_out_dtypes(ctx.out_dtypes());
  if (lowering->random) inner.set_rng_state(ctx.rng_state());
  std::vector<Value> out = lowering->fn(inner);
  if (lowering->random) ctx.set_rng_state(inner.rng_state());
  for (size_t i = 0; i < inner.checks().size(); ++i) {
    const std::string& tagged = inner.check_messages()[i];
    ctx.require(inner.checks()[i], tagged.substr(1), tagged[0] == 'I');
  }
  return out;
}

const Lowering* find_lowering(const std::string& op) {
  auto& names = registry().by_name;
  auto it = names.find(op);
  return it == names.end() ? nullptr : it->second.get();
}

std::vector<std::string> lowered_ops() {
  std::vector<std::string> out;
  for (const auto& [name, lowering] : registry().by_name) {
    if (!lowering->graph_only) out.push_back(name);
  }
  return out;
}

std::vector<std::string> graph_lowered_ops() {
  std::vector<std::string> out;
  for (const auto& [name, _] : registry().by_name) out.push_back(name);
  return out;
}

const LoweringArg& LoweringContext::arg(size_t i) const {
  TORCH_INTERNAL_ASSERT(i < args_.size(), "torch_pjrt: ", op_, " has no argument ", i);
  return args_[i];
}

Value LoweringContext::tensor(size_t i) const {
  const LoweringArg& a = arg(i);
  TORCH_INTERNAL_ASSERT(a.kind == LoweringArg::Kind::kTensor || a.kind == LoweringArg::Kind::kScalar,
                        "torch_pjrt: argument ", i, " of ", op_, " is not a tensor");
  return a.tensor;
}

c10::ScalarType LoweringContext::dtype(size_t i) const { return arg(i).dtype; }

std::vector<Value> LoweringContext::tensor_list(size_t i) const {
  const LoweringArg& a = arg(i);
  TORCH_INTERNAL_ASSERT(a.kind == LoweringArg::Kind::kTensorList, "torch_pjrt: argument ", i,
                        " of ", op_, " is not a tensor list");
  return a.tensors;
}

Value LoweringContext::scalar(size_t i, ElementType type) const {
  const LoweringArg& a = arg(i);
  if (a.kind == LoweringArg::Kind::kStatic) {
    const c10::IValue& v = a.value;
    if (v.isInt()) return b.constant_int(v.toInt(), type);
    if (v.isBool()) return b.constant_int(v.toBool(), type);
    if (v.isDouble()) return b.constant(v.toDouble(), type);
    TORCH_CHECK(v.isScalar(), "torch_pjrt: ", op_, " argument ", i, " is not a number");
    c10::Scalar s = v.toScalar();
    return s.isIntegral(false) ? b.constant_int(s.toLong(), type)
                               : b.constant(s.toDouble(), type);
  }
  Value v = tensor(i);
  TORCH_INTERNAL_ASSERT(b.type(v).rank() == 0, "torch_pjrt: argument ", i, " of ", op_,
                        " is not a scalar");
  return b.convert(v, type);
}

Value LoweringContext::random_bits(const TensorType& type) {
  TORCH_INTERNAL_ASSERT(rng_state_.valid(), "torch_pjrt: ", op_,
                        " draws random numbers but was not registered as random");
  auto out = b.rng_bit_generator(rng_state_, type);
  rng_state_ = out[0];
  return out[1];
}

const c10::IValue& LoweringContext::ivalue(size_t i) const {
  const LoweringArg& a = arg(i);
  TORCH_INTERNAL_ASSERT(a.kind == LoweringArg::Kind::kStatic || a.kind == LoweringArg::Kind::kNone,
                        "torch_pjrt: argument ", i, " of ", op_, " is not static");
  return a.value;
}

int64_t LoweringContext::int_arg(size_t i) const {
  const c10::IValue& v = ivalue(i);
  if (v.isScalar()) return v.toScalar().toLong();
  return v.toInt();
}

std::optional<int64_t> LoweringContext::optional_int(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return int_arg(i);
}

double LoweringContext::double_arg(size_t i) const {
  const c10::IValue& v = ivalue(i);
  if (v.isScalar()) return v.toScalar().toDouble();
  return v.toDouble();
}

bool LoweringContext::bool_arg(size_t i) const { return ivalue(i).toBool(); }

std::vector<int64_t> LoweringContext::int_list(size_t i) const {
  const c10::IValue& v = ivalue(i);
  if (v.isInt()) return {v.toInt()};
  return v.toIntVector();
}

std::optional<std::vector<int64_t>> LoweringContext::optional_int_list(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return int_list(i);
}

std::optional<c10::ScalarType> LoweringContext::optional_dtype(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return ivalue(i).toScalarType();
}

}  // namespace torch_pjrt::ops
