// Gamma and Dirichlet draws on the device: _standard_gamma (torch's
// Gamma.sample / rsample) and _sample_dirichlet (Dirichlet and Beta). They
// went to the CPU fallback.
//
// Marsaglia and Tsang's method: for concentration a >= 1, with d = a - 1/3
// and c = 1 / sqrt(9 d), a standard normal x gives v = (1 + c x)^3, accepted
// (as d v) when v > 0 and log u < x^2 / 2 + d (1 - v + log v) for a uniform u
// (the squeeze u < 1 - 0.0331 x^4 accepts most without the logs). Below 1,
// a draw for a + 1 is scaled by u^(1/a). The loop is unrolled into
// kRounds proposals per element, each kept if it is the first accepted: a
// proposal is accepted with probability above 0.95 for every a >= 1, so an
// element has not accepted after kRounds with probability below 0.05^16
// (about 1e-21); it then keeps its last proposal with v > 0 (or d), a bias
// far below what any test of the distribution can see.
#include <c10/util/Exception.h>

#include <limits>

#include "ops/helpers.h"
#include "ops/random_draws.h"

namespace torch_pjrt::ops {
namespace {

constexpr int kRounds = 16;

Value splat(Builder& b, double v, ElementType t, const std::vector<int64_t>& dims) {
  return b.splat(b.constant(v, t), dims);
}

// Standard gamma draws for concentrations `alpha` (float type `t`).
Value standard_gamma(LoweringContext& ctx, Value alpha) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(alpha);
  auto dims = b.dims(alpha);
  Value one = splat(b, 1.0, t, dims), zero = splat(b, 0.0, t, dims);
  Value small = b.compare(alpha, one, hlo::Compare::kLt);
  Value a = b.select(small, b.binary("add", alpha, one), alpha);
  Value d = b.binary("subtract", a, splat(b, 1.0 / 3.0, t, dims));
  Value c = b.unary("rsqrt", b.binary("multiply", splat(b, 9.0, t, dims), d));
  Value result = d;  // used only where no proposal is accepted (see above)
  Value done = b.splat(b.constant_bool(false), dims);
  for (int r = 0; r < kRounds; ++r) {
    Value x = standard_normal(ctx, dims, t);
    Value u = uniform01(ctx, dims, t);
    Value cx = b.binary("add", one, b.binary("multiply", c, x));
    Value v = b.binary("multiply", b.binary("multiply", cx, cx), cx);
    Value positive = b.compare(v, zero, hlo::Compare::kGt);
    Value x2 = b.binary("multiply", x, x);
    Value squeeze = b.compare(u, b.binary("subtract", one, b.binary("multiply", splat(b, 0.0331, t, dims),
                                                                    b.binary("multiply", x2, x2))),
                              hlo::Compare::kLt);
    Value safe_v = b.select(positive, v, one);
    Value bound = b.binary("add", b.binary("multiply", splat(b, 0.5, t, dims), x2),
                           b.binary("multiply", d, b.binary("add", b.binary("subtract", one, safe_v),
                                                             b.unary("log", safe_v))));
    Value log_test = b.compare(b.unary("log", u), bound, hlo::Compare::kLt);
    Value accept = b.binary("and", positive, b.binary("or", squeeze, log_test));
    Value take = b.binary("and", accept, b.unary("not", done));
    Value fallback = b.binary("and", positive, b.unary("not", done));  // last v > 0, until accepted
    Value candidate = b.binary("multiply", d, v);
    result = b.select(b.binary("or", take, fallback), candidate, result);
    done = b.binary("or", done, accept);
  }
  // Below 1: scale by u^(1/alpha), as log-space to keep tiny draws.
  Value u = uniform01(ctx, dims, t);
  Value boosted = b.unary("exponential", b.binary("add", b.unary("log", result),
                                                  b.binary("divide", b.unary("log", u), alpha)));
  result = b.select(small, boosted, result);
  // The smallest positive normal value, as torch clamps its draws.
  double tiny = t == ElementType::kF64 ? std::numeric_limits<double>::min()
                                        : static_cast<double>(std::numeric_limits<float>::min());
  return b.binary("maximum", result, splat(b, tiny, t, dims));
}

Value float_alpha(LoweringContext& ctx, const char* op) {
  Builder& b = ctx.b;
  c10::ScalarType type = ctx.dtype(0);
  TORCH_CHECK(c10::isFloatingType(type), op, ": expected a floating point tensor, got ", type);
  return b.convert(ctx.tensor(0), type == at::kDouble ? ElementType::kF64 : ElementType::kF32);
}

LoweringRegistrar registrar([] {
  // _standard_gamma(self, generator): Gamma(self, 1) draws.
  register_lowering("aten::_standard_gamma", [](LoweringContext& ctx) {
    Value alpha = float_alpha(ctx, "_standard_gamma");
    return std::vector<Value>{convert(ctx.b, standard_gamma(ctx, alpha), ctx.dtype(0))};
  }, {"aten::_standard_gamma.out"}, {}, {}, /*random=*/true);

  // _sample_dirichlet(self, generator): gamma draws normalized along the
  // last dim, clamped into [tiny, 1 - eps] where underflow would give 0 or 1.
  register_lowering("aten::_sample_dirichlet", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value alpha = float_alpha(ctx, "_sample_dirichlet");
    ElementType t = b.element_type(alpha);
    auto dims = b.dims(alpha);
    TORCH_CHECK(!dims.empty(), "_sample_dirichlet: expected at least one dim, got a 0-d tensor");
    Value g = standard_gamma(ctx, alpha);
    int64_t last = static_cast<int64_t>(dims.size()) - 1;
    std::vector<int64_t> keep;
    for (int64_t d = 0; d < last; ++d) keep.push_back(d);
    Value total = b.broadcast_in_dim(reduce(b, g, {last}, ReduceKind::kSum), dims, keep);
    double tiny = t == ElementType::kF64 ? std::numeric_limits<double>::min()
                                          : static_cast<double>(std::numeric_limits<float>::min());
    double eps = t == ElementType::kF64 ? std::numeric_limits<double>::epsilon()
                                         : static_cast<double>(std::numeric_limits<float>::epsilon());
    Value out = b.clamp(splat(b, tiny, t, dims), b.binary("divide", g, total), splat(b, 1.0 - eps, t, dims));
    return std::vector<Value>{convert(b, out, ctx.dtype(0))};
  }, {"aten::_sample_dirichlet.out"}, {}, {}, /*random=*/true);
});

}  // namespace
}  // namespace torch_pjrt::ops
