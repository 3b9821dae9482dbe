// Tensors made from nothing: fill_, zero_, arange, linspace, eye. zeros,
// ones, full and *_like are torch composites over empty + fill_.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

LoweringRegistrar registrar([] {
  // fill_ keeps self's shape and dtype; the value is a runtime scalar, so
  // filling with a new number never recompiles.
  register_lowering("aten::fill.Scalar", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    return std::vector<Value>{b.splat(ctx.scalar(1, b.element_type(self)), b.dims(self))};
  }, {"aten::fill_.Scalar", "aten::fill.Scalar_out"}, {}, {0});
  register_lowering("aten::fill.Tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    TORCH_CHECK(b.type(ctx.tensor(1)).rank() == 0, "fill_ only supports 0-dimension value tensor "
                "but got tensor with ", b.type(ctx.tensor(1)).rank(), " dimensions.");
    return std::vector<Value>{b.splat(b.convert(ctx.tensor(1), b.element_type(self)), b.dims(self))};
  }, {"aten::fill_.Tensor", "aten::fill.Tensor_out"}, {}, {0});
  register_lowering("aten::zero", [](LoweringContext& ctx) {
    Value self = ctx.tensor(0);
    return std::vector<Value>{ctx.b.zeros(ctx.b.type(self))};
  }, {"aten::zero_", "aten::zero.out"}, {}, {0});

  // arange, linspace and eye decide their length from their arguments, so
  // those are static: a new length is a new program.
  register_lowering("aten::arange.start_out", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::Scalar start = ctx.ivalue(0).toScalar(), end = ctx.ivalue(1).toScalar(),
                step = ctx.ivalue(2).toScalar();
    // torch computes in the out dtype's accumulate type: for integer
    // outputs the bounds and step are truncated to integers first.
    bool integral = ctx.out_dtypes().empty()
                        ? start.isIntegral(false) && end.isIntegral(false) && step.isIntegral(false)
                        : c10::isIntegralType(ctx.out_dtypes()[0], /*includeBool=*/true);
    double s = integral ? static_cast<double>(start.toLong()) : start.toDouble();
    double e = integral ? static_cast<double>(end.toLong()) : end.toDouble();
    double d = integral ? static_cast<double>(step.toLong()) : step.toDouble();
    TORCH_CHECK(d != 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
    TORCH_CHECK((d > 0 && e >= s) || (d < 0 && e <= s),
                "upper bound and larger bound inconsistent with step sign");
    int64_t n = static_cast<int64_t>(std::ceil((e - s) / d));
    ElementType t = integral ? ElementType::kS64 : ElementType::kF64;
    Value i = b.iota(TensorType{t, {n}}, 0);
    Value first = integral ? b.constant_int(start.toLong(), t) : b.constant(s, t);
    Value stride = integral ? b.constant_int(step.toLong(), t) : b.constant(d, t);
    Value v = b.binary("add", b.splat(first, {n}), b.binary("multiply", i, b.splat(stride, {n})));
    return std::vector<Value>{v};
  }, {}, {0, 1, 2});
  register_lowering("aten::linspace.out", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    int64_t n = ctx.int_arg(2);
    TORCH_CHECK(n >= 0, "number of steps must be non-negative");
    double s = ctx.ivalue(0).toScalar().toDouble(), e = ctx.ivalue(1).toScalar().toDouble();
    if (n == 0) return std::vector<Value>{b.zeros(TensorType{ElementType::kF64, {0}})};
    if (n == 1) return std::vector<Value>{b.splat(b.constant(s, ElementType::kF64), {1})};
    // Symmetric, as torch does: the first half counts up from start and the
    // second half down from end, so both ends are exact.
    double step = (e - s) / static_cast<double>(n - 1);
    Value i = b.iota(TensorType{ElementType::kF64, {n}}, 0);
    Value up = b.binary("add", b.splat(b.constant(s, ElementType::kF64), {n}),
                        b.binary("multiply", i, b.splat(b.constant(step, ElementType::kF64), {n})));
    Value from_end = b.binary("subtract", b.splat(b.constant(static_cast<double>(n - 1), ElementType::kF64), {n}), i);
    Value down = b.binary("subtract", b.splat(b.constant(e, ElementType::kF64), {n}),
                          b.binary("multiply", from_end,
                                   b.splat(b.constant(step, ElementType::kF64), {n})));
    Value first_half = b.compare(i, b.splat(b.constant(static_cast<double>(n / 2), ElementType::kF64), {n}),
                                 hlo::Compare::kLt);
    return std::vector<Value>{b.select(first_half, up, down)};
  }, {}, {0, 1});
  auto eye = [](LoweringContext& ctx, int64_t n, int64_t m) {
    Builder& b = ctx.b;
    TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
    TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
    TensorType t{ElementType::kS64, {n, m}};
    Value diagonal = b.compare(b.iota(t, 0), b.iota(t, 1), hlo::Compare::kEq);
    return std::vector<Value>{diagonal};
  };
  register_lowering("aten::eye.out", [eye](LoweringContext& ctx) {
    return eye(ctx, ctx.int_arg(0), ctx.int_arg(0));
  });
  register_lowering("aten::eye.m_out", [eye](LoweringContext& ctx) {
    return eye(ctx, ctx.int_arg(0), ctx.int_arg(1));
  });
});

}  // namespace
}  // namespace torch_pjrt::ops
