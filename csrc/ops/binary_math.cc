// Binary math torch defines beyond arithmetic: fmax/fmin (NaN-ignoring),
// heaviside, logaddexp/logaddexp2, hypot and copysign; and trace.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value is_nan(Builder& b, Value x) { return b.compare(x, x, hlo::Compare::kNe); }

Value splat(Builder& b, double v, Value like) {
  return b.splat(b.constant(v, b.element_type(like)), b.dims(like));
}

// Promotes arguments 0 and 1 (tensors or numbers) to `compute` and
// broadcasts them; `fn` gets the pair and returns the result in `compute`.
using PairFn = std::function<Value(Builder&, Value, Value)>;

void pair_op(const std::string& name, bool float_math, PairFn fn,
             std::vector<std::string> aliases) {
  register_lowering("aten::" + name, [float_math, fn](LoweringContext& ctx) {
    c10::ScalarType type = result_type(ctx, {0, 1});
    if (float_math) type = float_type(type);
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(ctx.b, {ctx.tensor(0), ctx.tensor(1)}, compute);
    return std::vector<Value>{convert(ctx.b, fn(ctx.b, xs[0], xs[1]), type)};
  }, std::move(aliases));
}

LoweringRegistrar registrar([] {
  // fmax/fmin: the other operand where one is NaN, NaN only where both are.
  for (bool is_max : {true, false}) {
    std::string name = is_max ? "fmax" : "fmin";
    pair_op(name, false, [is_max](Builder& b, Value x, Value y) {
      Value m = b.binary(is_max ? "maximum" : "minimum", x, y);
      if (!hlo::is_float(b.element_type(x))) return m;
      return b.select(is_nan(b, x), y, b.select(is_nan(b, y), x, m));
    }, {"aten::" + name + ".out"});
  }

  // heaviside(input, values): values where input == 0, else input > 0.
  // torch wants one dtype for both.
  register_lowering("aten::heaviside", [](LoweringContext& ctx) {
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "heaviside is not yet implemented for tensors with "
                "different dtypes");
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    Value x = xs[0];
    Value zero = b.zeros(b.type(x));
    Value step = b.convert(b.compare(x, zero, hlo::Compare::kGt), b.element_type(x));
    return std::vector<Value>{b.select(b.compare(x, zero, hlo::Compare::kEq), xs[1], step)};
  }, {"aten::heaviside_", "aten::heaviside.out"});

  // logaddexp(x, y) = max + log1p(exp(-|x - y|)); equal infinities give
  // themselves (no inf - inf). logaddexp2 in base 2.
  for (bool base2 : {false, true}) {
    std::string name = base2 ? "logaddexp2" : "logaddexp";
    pair_op(name, true, [base2](Builder& b, Value x, Value y) {
      Value m = b.binary("maximum", x, y);
      Value d = b.unary("negate", b.unary("abs", b.binary("subtract", x, y)));
      Value r;
      if (base2) {
        Value ln2 = splat(b, M_LN2, x);
        Value p = b.unary("exponential", b.binary("multiply", d, ln2));
        r = b.binary("add", m, b.binary("divide", b.unary("log_plus_one", p), ln2));
      } else {
        r = b.binary("add", m, b.unary("log_plus_one", b.unary("exponential", d)));
      }
      Value same_inf = b.binary("and", b.compare(x, y, hlo::Compare::kEq),
                                b.compare(b.unary("abs", x), splat(b, INFINITY, x), hlo::Compare::kEq));
      return b.select(same_inf, x, r);
    }, {"aten::" + name + ".out"});
  }

  // hypot(x, y) = big * sqrt(1 + (small / big)^2): no overflow of x*x.
  pair_op("hypot", true, [](Builder& b, Value x, Value y) {
    Value ax = b.unary("abs", x), ay = b.unary("abs", y);
    Value big = b.binary("maximum", ax, ay), small = b.binary("minimum", ax, ay);
    Value zero = b.zeros(b.type(big));
    Value ratio = b.binary("divide", small, b.select(b.compare(big, zero, hlo::Compare::kEq),
                                                      splat(b, 1.0, big), big));
    Value r = b.binary("multiply", big, b.unary("sqrt", b.binary("add", splat(b, 1.0, big),
                                                                   b.binary("multiply", ratio, ratio))));
    Value inf = splat(b, INFINITY, big);
    Value any_inf = b.binary("or", b.compare(ax, inf, hlo::Compare::kEq), b.compare(ay, inf, hlo::Compare::kEq));
    return b.select(any_inf, inf, r);
  }, {"aten::hypot_", "aten::hypot.out"});

  // copysign(x, y): |x| with y's sign bit (so -0.0 counts as negative).
  pair_op("copysign.Tensor", true, [](Builder& b, Value x, Value y) {
    ElementType t = b.element_type(y);
    size_t width = pjrt::byte_width(t);
    ElementType bits = width == 8 ? ElementType::kS64 : width == 4 ? ElementType::kS32 : ElementType::kS16;
    Value negative = b.compare(b.bitcast_convert(y, bits), b.zeros(TensorType{bits, b.dims(y)}),
                               hlo::Compare::kLt);
    Value ax = b.unary("abs", x);
    return b.select(negative, b.unary("negate", ax), ax);
  }, {"aten::copysign_.Tensor", "aten::copysign.out"});

  // rsub(self, other, alpha) = other - alpha * self
  register_lowering("aten::rsub.Tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    TORCH_CHECK(type != at::kBool, "Subtraction, the `-` operator, with two bool tensors is not "
                "supported. Use the `^` or `logical_xor()` operator instead.");
    TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type) || ctx.arg(2).dtype != at::kDouble,
                "For integral input tensors, argument alpha must not be a floating point number.");
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, compute);
    Value alpha = b.splat(ctx.scalar(2, et(compute)), b.dims(xs[0]));
    return std::vector<Value>{convert(b, b.binary("subtract", xs[1], b.binary("multiply", alpha, xs[0])), type)};
  }, {"aten::rsub.Tensor_out"});

  // xlog1py(x, y) = x * log1p(y), 0 where x == 0 (unless y is NaN).
  pair_op("special_xlog1py", true, [](Builder& b, Value x, Value y) {
    Value r = b.binary("multiply", x, b.unary("log_plus_one", y));
    Value zero = b.compare(x, b.zeros(b.type(x)), hlo::Compare::kEq);
    return b.select(b.binary("and", zero, b.unary("not", is_nan(b, y))), b.zeros(b.type(r)), r);
  }, {"aten::special_xlog1py.out"});

  // trace(self): the sum of a matrix's diagonal, in sum's dtype.
  register_lowering("aten::trace", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto dims = b.dims(x);
    TORCH_CHECK(dims.size() == 2, "trace: expected a matrix, but got tensor with dim ", dims.size());
    c10::ScalarType in = ctx.dtype(0);
    c10::ScalarType out = c10::isIntegralType(in, /*includeBool=*/true) ? at::kLong : in;
    Value v = convert(b, x, opmath_type(out));
    TensorType idx{ElementType::kS64, dims};
    Value diag = b.compare(b.iota(idx, 0), b.iota(idx, 1), hlo::Compare::kEq);
    Value r = reduce(b, b.select(diag, v, b.zeros(b.type(v))), {0, 1}, ReduceKind::kSum);
    return std::vector<Value>{convert(b, r, out)};
  }, {"aten::trace.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
