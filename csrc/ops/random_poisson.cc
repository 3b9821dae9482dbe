// Poisson draws on the device: torch.poisson (and Poisson.sample), which
// went to the CPU fallback.
//
// Below a rate of 10, inversion: one uniform u per element against the
// cumulative probabilities of 0 .. kTerms - 1 events (a rate below 10 puts
// less than 1e-12 of its mass past kTerms). From 10 up, Hörmann's
// transformed rejection with squeeze (PTRS, 1993), unrolled into kRounds
// proposals per element, the first accepted kept: each is accepted with
// probability above 0.9, so an element is left without one with
// probability below 1e-16 (it then takes the rounded rate). A negative or
// NaN rate is an error, as on the CPU.
#include <c10/util/Exception.h>

#include "ops/helpers.h"
#include "ops/random_draws.h"

namespace torch_pjrt::ops {
namespace {

constexpr int64_t kTerms = 40;
constexpr int kRounds = 16;

Value poisson_draw(LoweringContext& ctx, Value lam) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(lam);
  auto dims = b.dims(lam);
  auto c = [&](double v) { return b.splat(b.constant(v, t), dims); };
  Value zero = c(0.0);
  Value positive = b.compare(lam, zero, hlo::Compare::kGt);
  Value safe_lam = b.select(positive, lam, c(1.0));
  Value log_lam = b.unary("log", safe_lam);

  // Inversion over kTerms terms: count of k with CDF(k) < u.
  std::vector<int64_t> wide = dims;
  wide.push_back(kTerms);
  std::vector<int64_t> keep;
  for (size_t d = 0; d < dims.size(); ++d) keep.push_back(static_cast<int64_t>(d));
  int64_t last = static_cast<int64_t>(dims.size());
  Value k = b.convert(b.iota(TensorType{ElementType::kS64, wide}, last), t);
  Value log_pmf = b.binary("subtract",
                           b.binary("subtract", b.binary("multiply", k, b.broadcast_in_dim(log_lam, wide, keep)),
                                    b.broadcast_in_dim(safe_lam, wide, keep)),
                           b.unary("chlo.lgamma", b.binary("add", k, b.splat(b.constant(1.0, t), wide))));
  Value pmf = b.unary("exponential", log_pmf);
  Value small_draw = count_below_uniform(ctx, pmf);

  // PTRS from a rate of 10 up.
  Value slam = b.unary("sqrt", safe_lam);
  Value bb = b.binary("add", c(0.931), b.binary("multiply", c(2.53), slam));
  Value a = b.binary("add", c(-0.059), b.binary("multiply", c(0.02483), bb));
  Value inv_alpha = b.binary("add", c(1.1239), b.binary("divide", c(1.1328), b.binary("subtract", bb, c(3.4))));
  Value vr = b.binary("subtract", c(0.9277), b.binary("divide", c(3.6224), b.binary("subtract", bb, c(2.0))));
  Value large_draw = b.unary("round_nearest_even", safe_lam);
  Value done = b.splat(b.constant_bool(false), dims);
  for (int r = 0; r < kRounds; ++r) {
    Value uu = b.binary("subtract", uniform01(ctx, dims, t), c(0.5));
    Value v = uniform01(ctx, dims, t);
    Value us = b.binary("subtract", c(0.5), b.unary("abs", uu));
    Value safe_us = b.binary("maximum", us, c(1e-12));
    Value kk = b.unary("floor", b.binary("add", b.binary("add", b.binary("multiply",
                           b.binary("add", b.binary("divide", b.binary("multiply", c(2.0), a), safe_us), bb), uu),
                           safe_lam), c(0.43)));
    Value quick = b.binary("and", b.compare(us, c(0.07), hlo::Compare::kGe), b.compare(v, vr, hlo::Compare::kLe));
    Value reject = b.binary("or", b.compare(kk, zero, hlo::Compare::kLt),
                            b.binary("and", b.compare(us, c(0.013), hlo::Compare::kLt),
                                     b.compare(v, us, hlo::Compare::kGt)));
    Value safe_k = b.binary("maximum", kk, zero);
    Value lhs = b.binary("subtract", b.binary("add", b.unary("log", b.binary("maximum", v, c(1e-30))),
                                              b.unary("log", inv_alpha)),
                         b.unary("log", b.binary("add", b.binary("divide", a, b.binary("multiply", safe_us, safe_us)),
                                                 bb)));
    Value rhs = b.binary("subtract", b.binary("subtract", b.binary("multiply", safe_k, log_lam), safe_lam),
                         b.unary("chlo.lgamma", b.binary("add", safe_k, c(1.0))));
    Value slow = b.binary("and", b.unary("not", reject), b.compare(lhs, rhs, hlo::Compare::kLe));
    Value accept = b.binary("or", quick, slow);
    Value take = b.binary("and", accept, b.unary("not", done));
    large_draw = b.select(take, kk, large_draw);
    done = b.binary("or", done, accept);
  }
  Value draw = b.select(b.compare(lam, c(10.0), hlo::Compare::kLt), small_draw, large_draw);
  return b.select(positive, draw, zero);
}

LoweringRegistrar registrar([] {
  // poisson(self, generator): counts drawn at the rates in self.
  register_lowering("aten::poisson", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(c10::isFloatingType(type), "poisson: expected a floating point tensor of rates, got ", type);
    Value lam = b.convert(ctx.tensor(0), type == at::kDouble ? ElementType::kF64 : ElementType::kF32);
    Value ok = b.compare(lam, b.zeros(b.type(lam)), hlo::Compare::kGe);  // false for NaN
    ctx.require(reduce(b, b.convert(ok, ElementType::kPred), all_dims(b.type(lam).rank()), ReduceKind::kAnd),
                "invalid Poisson rate, expected rate to be non-negative", /*index_error=*/false);
    return std::vector<Value>{convert(b, poisson_draw(ctx, lam), type)};
  }, {"aten::poisson.out"}, {}, {}, /*random=*/true);
});

}  // namespace
}  // namespace torch_pjrt::ops
