// softmax and log_softmax with their backward ops, computed in f32 for
// bf16/f16 inputs as torch does.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

c10::ScalarType output_type(LoweringContext& ctx, size_t half_to_float_arg) {
  c10::ScalarType in = ctx.dtype(0);
  bool half_to_float = ctx.bool_arg(half_to_float_arg);
  if (half_to_float) {
    TORCH_CHECK(in == at::kHalf, "conversion is supported for Half type only");
    return at::kFloat;
  }
  return in;
}

Value log_softmax_of(Builder& b, Value x, int64_t dim) {
  auto dims = b.dims(x);
  if (dims.empty()) return b.zeros(b.type(x));
  Value m = reduce(b, x, {dim}, ReduceKind::kMax);
  // An all -inf row keeps NaN out of the shift.
  ElementType t = b.element_type(x);
  Value finite = b.compare(b.unary("abs", m), b.splat(b.constant(INFINITY, t), b.dims(m)),
                           hlo::Compare::kNe);
  m = b.select(finite, m, b.zeros(TensorType{t, b.dims(m)}));
  Value shifted = b.binary("subtract", x, expand_reduced(b, m, dims, {dim}));
  Value sum = reduce(b, b.unary("exponential", shifted), {dim}, ReduceKind::kSum);
  return b.binary("subtract", shifted, expand_reduced(b, b.unary("log", sum), dims, {dim}));
}

LoweringRegistrar registrar([] {
  register_lowering("aten::_softmax", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType out = output_type(ctx, 2);
    Value x = convert(b, ctx.tensor(0), opmath_type(out));
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, b.type(x).rank()));
    if (b.type(x).rank() == 0) return std::vector<Value>{convert(b, b.splat(b.constant(1, b.element_type(x)), {}), out)};
    return std::vector<Value>{convert(b, b.unary("exponential", log_softmax_of(b, x, dim)), out)};
  }, {"aten::_softmax.out"});
  register_lowering("aten::_log_softmax", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType out = output_type(ctx, 2);
    Value x = convert(b, ctx.tensor(0), opmath_type(out));
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, b.type(x).rank()));
    return std::vector<Value>{convert(b, log_softmax_of(b, x, dim), out)};
  }, {"aten::_log_softmax.out"});
  // grad_input = y * (g - sum(g * y))
  register_lowering("aten::_softmax_backward_data", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType in_type = ctx.ivalue(3).toScalarType();
    c10::ScalarType compute = opmath_type(ctx.dtype(0));
    Value g = convert(b, ctx.tensor(0), compute), y = convert(b, ctx.tensor(1), compute);
    auto dims = b.dims(y);
    if (dims.empty()) return std::vector<Value>{convert(b, b.zeros(b.type(g)), in_type)};
    int64_t dim = wrap_dim(ctx.int_arg(2), static_cast<int64_t>(dims.size()));
    Value gy = b.binary("multiply", g, y);
    Value s = expand_reduced(b, reduce(b, gy, {dim}, ReduceKind::kSum), dims, {dim});
    return std::vector<Value>{convert(b, b.binary("subtract", gy, b.binary("multiply", y, s)), in_type)};
  }, {"aten::_softmax_backward_data.out"});
  // grad_input = g - exp(y) * sum(g)
  register_lowering("aten::_log_softmax_backward_data", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType in_type = ctx.ivalue(3).toScalarType();
    c10::ScalarType compute = opmath_type(ctx.dtype(0));
    Value g = convert(b, ctx.tensor(0), compute), y = convert(b, ctx.tensor(1), compute);
    auto dims = b.dims(y);
    if (dims.empty()) return std::vector<Value>{convert(b, b.zeros(b.type(g)), in_type)};
    int64_t dim = wrap_dim(ctx.int_arg(2), static_cast<int64_t>(dims.size()));
    Value s = expand_reduced(b, reduce(b, g, {dim}, ReduceKind::kSum), dims, {dim});
    Value r = b.binary("subtract", g, b.binary("multiply", b.unary("exponential", y), s));
    return std::vector<Value>{convert(b, r, in_type)};
  }, {"aten::_log_softmax_backward_data.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
