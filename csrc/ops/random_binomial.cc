// Binomial draws on the device: torch.binomial (Binomial.sample), which went
// to the CPU fallback.
//
// With p folded to at most 1/2 (a draw for 1 - p subtracted from n):
// below n p = 10, inversion, one uniform u against the cumulative
// probabilities of 0 .. kTerms - 1 successes (a mean below 10 leaves less
// than 1e-12 of the mass past kTerms); from 10 up, Hörmann's transformed
// rejection with squeeze (BTRS, 1993), unrolled into kRounds proposals, the
// first accepted kept (each accepted with probability above 0.8; an element
// left without one, with probability below 1e-11, takes the mode). Its
// acceptance test compares log(m! (n-m)! / (k! (n-k)!)) written as
// log1p's of small ratios plus Stirling remainders, which float32 holds for
// counts of millions (log-factorial differences would cancel). As the
// CPU kernel does: the count is truncated to an integer, a count <= 0 or a
// probability <= 0 gives 0, a probability >= 1 gives the count, and a NaN
// probability gives NaN.
#include <c10/util/Exception.h>

#include "ops/helpers.h"
#include "ops/random_draws.h"

namespace torch_pjrt::ops {
namespace {

constexpr int64_t kTerms = 40;
constexpr int kRounds = 24;

Value binomial_draw(LoweringContext& ctx, Value n, Value p) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(n);
  auto dims = b.dims(n);
  auto c = [&](double v) { return b.splat(b.constant(v, t), dims); };
  auto add = [&](Value x, Value y) { return b.binary("add", x, y); };
  auto sub = [&](Value x, Value y) { return b.binary("subtract", x, y); };
  auto mul = [&](Value x, Value y) { return b.binary("multiply", x, y); };
  auto div = [&](Value x, Value y) { return b.binary("divide", x, y); };

  Value flip = b.compare(p, c(0.5), hlo::Compare::kGt);
  Value q_small = b.select(flip, sub(c(1.0), p), p);  // in (0, 1/2]
  Value pp = b.clamp(c(1e-30), q_small, c(0.5));
  Value qq = sub(c(1.0), pp);
  Value log_p = b.unary("log", pp), log_q = b.unary("log", qq);
  Value mean = mul(n, pp);

  // Inversion. log pmf(k) = n log q + sum_{j<k} log((n - j) / (j + 1) * p / q):
  // ratios of nearby numbers, never differences of large log-factorials
  // (which float32 cannot hold for counts of a million).
  std::vector<int64_t> wide = dims;
  wide.push_back(kTerms);
  std::vector<int64_t> keep;
  for (size_t d = 0; d < dims.size(); ++d) keep.push_back(static_cast<int64_t>(d));
  int64_t last = static_cast<int64_t>(dims.size());
  auto widen = [&](Value v) { return b.broadcast_in_dim(v, wide, keep); };
  Value j = b.convert(b.iota(TensorType{ElementType::kS64, wide}, last), t);
  Value nw = widen(n);
  Value one_w = b.splat(b.constant(1.0, t), wide);
  Value left = b.binary("maximum", b.binary("subtract", nw, j), one_w);  // n - j, kept >= 1
  Value step = b.binary("add", b.unary("log", b.binary("divide", left, b.binary("add", j, one_w))),
                        widen(sub(log_p, log_q)));
  Value log_pmf = b.binary("add", widen(mul(n, log_q)), running_sum_last(b, step, /*inclusive=*/false));
  Value in_support = b.compare(j, nw, hlo::Compare::kLe);
  Value pmf = b.select(in_support, b.unary("exponential", log_pmf), b.zeros(TensorType{t, wide}));
  Value small_draw = b.binary("minimum", count_below_uniform(ctx, pmf), n);

  // BTRS.
  Value spq = b.unary("sqrt", mul(mean, qq));
  Value bb = add(c(1.15), mul(c(2.53), spq));
  Value a = add(add(c(-0.0873), mul(c(0.0248), bb)), mul(c(0.01), pp));
  Value cc = add(mean, c(0.5));
  Value alpha = mul(add(c(2.83), div(c(5.1), bb)), spq);
  Value vr = sub(c(0.92), div(c(4.2), bb));
  Value urvr = mul(c(0.86), vr);
  Value m = b.unary("floor", mul(add(n, c(1.0)), pp));
  Value log_ratio = sub(log_p, log_q);
  // Stirling's remainder of log((x - 1)!) = lgamma(x): exact below 10,
  // the series 1/12x - 1/360x^3 + 1/1260x^5 from there.
  auto stirling_rest = [&](Value x) {
    Value half_log_2pi = c(0.91893853320467274178);
    Value exact = sub(b.unary("chlo.lgamma", x), add(sub(mul(sub(x, c(0.5)), b.unary("log", x)), x), half_log_2pi));
    Value x2 = mul(x, x);
    Value series = div(sub(c(1.0 / 12.0), div(sub(c(1.0 / 360.0), div(c(1.0 / 1260.0), x2)), x2)), x);
    return b.select(b.compare(x, c(10.0), hlo::Compare::kLt), exact, series);
  };
  // log(m! (n-m)! / (k! (n-k)!)) as log1p's of small ratios (see the header).
  auto log_factorial_ratio = [&](Value k) {
    Value nm1 = add(sub(n, m), c(1.0)), nk1 = add(sub(n, k), c(1.0)), k1 = add(k, c(1.0));
    Value t1 = mul(add(m, c(0.5)), b.unary("log_plus_one", div(sub(m, k), k1)));
    Value t2 = mul(add(sub(n, m), c(0.5)), b.unary("log_plus_one", div(sub(k, m), nk1)));
    Value t3 = mul(sub(k, m), b.unary("log", div(nk1, k1)));
    Value rest = sub(add(stirling_rest(add(m, c(1.0))), stirling_rest(nm1)), add(stirling_rest(k1), stirling_rest(nk1)));
    return add(add(add(t1, t2), t3), rest);
  };
  Value large_draw = m;
  Value done = b.splat(b.constant_bool(false), dims);
  for (int r = 0; r < kRounds; ++r) {
    Value v = uniform01(ctx, dims, t);
    Value w = uniform01(ctx, dims, t);
    Value x = uniform01(ctx, dims, t);
    // The squeeze: v <= urvr accepts at once.
    Value quick = b.compare(v, urvr, hlo::Compare::kLe);
    Value u_quick = sub(div(v, vr), c(0.43));
    Value k_quick = b.unary("floor", add(mul(add(div(mul(c(2.0), a), sub(c(0.5), b.unary("abs", u_quick))), bb),
                                             u_quick), cc));
    // Otherwise a point from the hat.
    Value high = b.compare(v, vr, hlo::Compare::kGe);
    Value u_mid = sub(div(v, vr), c(0.93));
    Value u_mid_f = sub(mul(b.unary("sign", u_mid), c(0.5)), u_mid);
    Value u = b.select(high, sub(w, c(0.5)), u_mid_f);
    Value v2 = b.select(high, v, mul(x, vr));
    Value us = b.binary("maximum", sub(c(0.5), b.unary("abs", u)), c(1e-12));
    Value kk = b.unary("floor", add(mul(add(div(mul(c(2.0), a), us), bb), u), cc));
    Value inside = b.binary("and", b.compare(kk, c(0.0), hlo::Compare::kGe), b.compare(kk, n, hlo::Compare::kLe));
    Value k_safe = b.clamp(c(0.0), kk, n);
    Value lhs = b.unary("log", b.binary("maximum", div(mul(v2, alpha), add(div(a, mul(us, us)), bb)), c(1e-30)));
    Value rhs = add(log_factorial_ratio(k_safe), mul(sub(k_safe, m), log_ratio));
    Value slow = b.binary("and", b.unary("not", quick),
                          b.binary("and", inside, b.compare(lhs, rhs, hlo::Compare::kLe)));
    Value accept = b.binary("or", quick, slow);
    Value take = b.binary("and", accept, b.unary("not", done));
    large_draw = b.select(take, b.select(quick, b.clamp(c(0.0), k_quick, n), k_safe), large_draw);
    done = b.binary("or", done, accept);
  }
  Value draw = b.select(b.compare(mean, c(10.0), hlo::Compare::kLt), small_draw, large_draw);
  return b.select(flip, sub(n, draw), draw);
}

LoweringRegistrar registrar([] {
  // binomial(count, prob, generator)
  register_lowering("aten::binomial", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(c10::isFloatingType(type), "binomial: expected a floating point tensor of counts, got ", type);
    ElementType t = type == at::kDouble ? ElementType::kF64 : ElementType::kF32;
    Value count = b.convert(ctx.tensor(0), t);
    Value prob = broadcast_to(b, b.convert(ctx.tensor(1), t), b.dims(count));
    auto dims = b.dims(count);
    Value zero = b.zeros(TensorType{t, dims}), one = b.splat(b.constant(1.0, t), dims);
    Value n = b.binary("maximum", b.binary("multiply", b.unary("sign", count), b.unary("floor", b.unary("abs", count))),
                       zero);
    Value inner = b.binary("and", b.compare(prob, zero, hlo::Compare::kGt), b.compare(prob, one, hlo::Compare::kLt));
    Value drawn = binomial_draw(ctx, n, b.select(inner, prob, b.splat(b.constant(0.5, t), dims)));
    Value all = b.binary("maximum", count, zero);  // p >= 1: the count itself, as the CPU kernel
    Value out = b.select(inner, drawn, b.select(b.compare(prob, one, hlo::Compare::kGe), all, zero));
    out = b.select(b.compare(prob, prob, hlo::Compare::kNe), prob, out);  // NaN stays NaN
    return std::vector<Value>{convert(b, out, type)};
  }, {"aten::binomial.out"}, {}, {}, /*random=*/true);
});

}  // namespace
}  // namespace torch_pjrt::ops
