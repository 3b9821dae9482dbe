// torch.igamma and torch.igammac: the regularized incomplete gamma functions
// P(a, x) = gamma(a, x) / Gamma(a) and Q(a, x) = 1 - P(a, x), binary with
// torch's type promotion, computed in float64 and rounded once.
//
// Three ways, each element taking one:
//  - x < a + 1: the series P = x^a e^-x / Gamma(a + 1) sum_n x^n / ((a+1)...(a+n));
//  - otherwise: Legendre's continued fraction Q = x^a e^-x / Gamma(a) /
//    (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))),
//    by the modified Lentz method.
//  Both iterate in one stablehlo.while until every element has converged.
//  - a > 200 and |eta| <= 0.6 (x near a, where both would need ~8 sqrt(a)
//    steps): the uniform asymptotic expansion in a (Temme's),
//    Q = erfc(eta sqrt(a/2)) / 2 + R, P = erfc(-eta sqrt(a/2)) / 2 - R,
//    R = e^(-a eta^2 / 2) / sqrt(2 pi a) sum_k c_k(eta) a^-k,
//    lambda = x / a, eta^2 / 2 = lambda - 1 - log(lambda) (eta's sign that of
//    lambda - 1), c_0 = 1/(lambda - 1) - 1/eta and c_k = c_(k-1)'(eta) / eta
//    + (-1)^k g_k / (lambda - 1), g_k the coefficients of Stirling's series
//    Gamma(a) = sqrt(2 pi / a) (a/e)^a sum_k g_k a^-k. The Taylor
//    coefficients of c_k in eta are derived here, once, from those
//    definitions by power-series arithmetic.
// The prefactor x^a e^-x / Gamma(a) is exp(-a phi(t) - mu(a)) sqrt(a / (2 pi))
// with t = (x - a)/a, a phi = (x - a) - a log(1 + t) and mu(a) = log Gamma(a) - (a -
// 1/2) log a + a - log(2 pi)/2 (Stirling's series for a >= 10), so large a
// loses no digits to a log x - x - log Gamma(a).
// Edge values (a or x zero, negative, infinite or NaN) follow CPU's order of
// cases exactly.
#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/arith.h"

namespace torch_pjrt::ops {
namespace {

using Ops = Arith;

constexpr int kTerms = 7;        // c_0 .. c_6 (the next, c_7 / a^7, below 1e-19 at a = 200)
constexpr int kSeriesLen = 44;   // power series length of the derivation
constexpr double kUniformA = 200.0;
constexpr double kUniformEta = 0.6;
constexpr int kMaxSteps = 500;   // far above the ~120 any element needs

// Bernoulli numbers B_0..B_n, from sum_{k<=m} C(m+1, k) B_k = 0.
std::vector<double> bernoulli(int n) {
  std::vector<double> bn(n + 1, 0.0);
  bn[0] = 1.0;
  for (int m = 1; m <= n; ++m) {
    double s = 0.0, binom = 1.0;  // C(m + 1, k)
    for (int k = 0; k < m; ++k) {
      s += binom * bn[k];
      binom = binom * double(m + 1 - k) / double(k + 1);
    }
    bn[m] = -s / double(m + 1);
  }
  return bn;
}

using Series = std::vector<double>;  // coefficients of eta^0, eta^1, ...

Series mul(const Series& p, const Series& q) {
  Series r(kSeriesLen, 0.0);
  for (int i = 0; i < kSeriesLen; ++i) {
    for (int j = 0; i + j < kSeriesLen; ++j) r[i + j] += p[i] * q[j];
  }
  return r;
}

// The Taylor coefficients of c_0 .. c_(kTerms-1) in eta (see the top).
const std::vector<Series>& temme_coefficients() {
  static const std::vector<Series> coefficients = [] {
    // mu = lambda - 1 = eta + m_2 eta^2 + ...: mu - log(1 + mu) = eta^2 / 2.
    // The coefficient of eta^(k+1) in the left side is m_k + (terms in
    // m_2..m_(k-1)), so each m_k follows from the previous ones.
    auto f = [](const Series& mu) {
      Series r(kSeriesLen, 0.0), power = mul(mu, mu);
      for (int j = 2; j < kSeriesLen; ++j) {
        for (int i = 0; i < kSeriesLen; ++i) r[i] += (j % 2 == 0 ? 1.0 : -1.0) * power[i] / j;
        power = mul(power, mu);
      }
      return r;
    };
    Series mu(kSeriesLen, 0.0);
    mu[1] = 1.0;
    for (int k = 2; k + 1 < kSeriesLen; ++k) mu[k] = -f(mu)[k + 1];
    // 1 / mu = inv / eta, inv = 1 / (mu / eta).
    Series v(kSeriesLen, 0.0), inv(kSeriesLen, 0.0);
    for (int i = 0; i + 1 < kSeriesLen; ++i) v[i] = mu[i + 1];
    inv[0] = 1.0 / v[0];
    for (int n = 1; n < kSeriesLen; ++n) {
      double s = 0.0;
      for (int k = 1; k <= n; ++k) s += v[k] * inv[n - k];
      inv[n] = -s / v[0];
    }
    // Stirling: Gamma*(a) = exp(sum_j B_2j / (2j (2j - 1)) z^(2j - 1)), z = 1/a.
    std::vector<double> bn = bernoulli(2 * kTerms + 2);
    Series z(kSeriesLen, 0.0), g(kSeriesLen, 0.0), term(kSeriesLen, 0.0);
    for (int j = 1; 2 * j - 1 < kTerms + 1; ++j) z[2 * j - 1] = bn[2 * j] / (2.0 * j * (2 * j - 1));
    g[0] = term[0] = 1.0;
    for (int n = 1; n <= kTerms; ++n) {
      term = mul(term, z);
      for (double& t : term) t /= n;
      for (int i = 0; i < kSeriesLen; ++i) g[i] += term[i];
    }
    // c_0 = (inv - 1) / eta; c_k = c_(k-1)' / eta + (-1)^k g_k inv / eta,
    // whose 1/eta terms cancel.
    std::vector<Series> c(kTerms, Series(kSeriesLen, 0.0));
    for (int i = 0; i + 1 < kSeriesLen; ++i) c[0][i] = inv[i + 1];
    for (int k = 1; k < kTerms; ++k) {
      double sign = k % 2 == 0 ? 1.0 : -1.0;
      for (int i = 0; i + 2 < kSeriesLen; ++i) {
        c[k][i] = (i + 2) * c[k - 1][i + 2] + sign * g[k] * inv[i + 1];
      }
    }
    return c;
  }();
  return coefficients;
}

// How many Taylor terms of c_k are used: the series converge for |eta| <
// 2 sqrt(pi) (where lambda(eta) has its nearest branch point), so at |eta|
// <= 0.6 the terms fall like 0.17^n, and c_k is divided by a^k >= 200^k:
// 22 - 3k terms leave errors below 1e-19. (The derivation keeps c_6 exact
// to eta^30.)
int taylor_terms(int k) { return 22 - 3 * k; }

// mu(a) = log Gamma(a) - (a - 1/2) log a + a - log(2 pi) / 2.
Value stirling_remainder(const Ops& o, Value a) {
  std::vector<double> bn = bernoulli(16);
  Value inv = o.div(o.c(1.0), a), inv2 = o.mul(inv, inv);
  Value s = o.c(0.0);
  for (int j = 8; j >= 1; --j) {
    s = o.add(o.mul(s, inv2), o.c(bn[2 * j] / (2.0 * j * (2 * j - 1))));
  }
  Value series = o.mul(s, inv);
  Value direct = o.add(o.sub(o.b.unary("chlo.lgamma", a), o.mul(o.sub(a, o.c(0.5)), o.log(a))),
                       o.sub(a, o.c(0.5 * std::log(2.0 * M_PI))));
  return o.sel(o.lt(a, o.c(10.0)), direct, series);
}

// P and Q for a > 0, x > 0 (finite; other elements hold placeholders).
std::pair<Value, Value> incomplete_gamma(const Ops& o, Value a, Value x) {
  Builder& b = o.b;
  // a phi = (x - a) - a log(x/a); log(x/a) as log1p(t) near 1, where the
  // difference of logs would cancel, and as that difference elsewhere (t
  // itself loses digits when x/a is small).
  Value diff = o.sub(x, a);
  Value t = o.div(diff, a);
  Value log_lambda = o.sel(o.lt(o.abs(t), o.c(0.5)), b.unary("log_plus_one", t),
                           o.sub(o.log(x), o.log(a)));
  Value a_phi = o.sub(diff, o.mul(a, log_lambda));  // >= 0
  Value phi = o.div(a_phi, a);
  Value log_prefactor = o.sub(o.mul(o.c(0.5), o.log(o.div(a, o.c(2.0 * M_PI)))),
                              o.add(a_phi, stirling_remainder(o, a)));
  Value prefactor = o.exp(log_prefactor);  // x^a e^-x / Gamma(a)

  // The uniform expansion.
  Value eta = o.b.unary("sqrt", o.add(phi, phi));
  eta = o.sel(o.lt(t, o.c(0.0)), o.neg(eta), eta);
  const auto& coefficients = temme_coefficients();
  Value inv_a = o.div(o.c(1.0), a);
  Value sum = o.c(0.0);
  for (int k = kTerms - 1; k >= 0; --k) {
    int n = taylor_terms(k);
    Value ck = o.c(coefficients[k][n - 1]);
    for (int i = n - 2; i >= 0; --i) ck = o.add(o.mul(ck, eta), o.c(coefficients[k][i]));
    sum = o.add(o.mul(sum, inv_a), ck);
  }
  Value r = o.mul(o.exp(o.neg(a_phi)),
                  o.mul(sum, b.unary("rsqrt", o.mul(a, o.c(2.0 * M_PI)))));
  Value arg = o.mul(eta, b.unary("sqrt", o.mul(a, o.c(0.5))));
  // erfc(arg) and erfc(-arg) from one erfc(|arg|) <= 1 (the other is 2 minus it).
  Value e = b.unary("chlo.erfc", o.abs(arg)), e2 = o.sub(o.c(2.0), e);
  Value positive = o.gt(arg, o.c(0.0));
  Value q_uniform = o.add(o.mul(o.c(0.5), o.sel(positive, e, e2)), r);
  Value p_uniform = o.sub(o.mul(o.c(0.5), o.sel(positive, e2, e)), r);
  Value uniform = o.both(o.gt(a, o.c(kUniformA)), o.le(o.abs(eta), o.c(kUniformEta)));

  // The series and the continued fraction, in one loop.
  Value use_series = o.lt(x, o.add(a, o.c(1.0)));
  const double tiny = 1e-300, eps = 1e-16;
  Value one = o.c(1.0);
  Value b0 = o.sel(use_series, o.c(2.0), o.sub(o.add(x, one), a));
  Value d0 = o.div(one, b0);
  std::vector<int64_t> all = all_dims(b.type(a).rank());
  auto out = b.while_loop(
      {b.constant_int(0, ElementType::kS64), uniform, a, x, use_series,
       one, one,                  // series: term, sum
       b0, o.c(1.0 / tiny), d0, d0},  // fraction: b, c, d, h
      [&all](Builder& r, const std::vector<Value>& v) {
        Value more = r.compare(v[0], r.constant_int(kMaxSteps, ElementType::kS64), hlo::Compare::kLt);
        Value pending = reduce(r, r.unary("not", v[1]), all, ReduceKind::kOr);
        return std::vector<Value>{r.binary("and", more, pending)};
      },
      [&](Builder& r, const std::vector<Value>& v) {
        Ops p{r, v[2]};
        Value i = r.binary("add", v[0], r.constant_int(1, ElementType::kS64));
        Value n = r.splat(r.convert(i, ElementType::kF64), r.dims(v[2]));
        Value done = v[1], a = v[2], x = v[3], series = v[4];
        // Series.
        Value term = p.mul(v[5], p.div(x, p.add(a, n)));
        Value sum = p.add(v[6], term);
        Value series_done = p.le(p.abs(term), p.mul(p.c(eps), p.abs(sum)));
        // Continued fraction (modified Lentz).
        Value an = p.neg(p.mul(n, p.sub(n, a)));
        Value bn = p.add(v[7], p.c(2.0));
        Value d = p.add(p.mul(an, v[9]), bn);
        d = p.sel(p.lt(p.abs(d), p.c(tiny)), p.c(tiny), d);
        Value c = p.add(bn, p.div(an, v[8]));
        c = p.sel(p.lt(p.abs(c), p.c(tiny)), p.c(tiny), c);
        d = p.div(p.c(1.0), d);
        Value delta = p.mul(c, d);
        Value h = p.mul(v[10], delta);
        Value cf_done = p.le(p.abs(p.sub(delta, p.c(1.0))), p.c(eps));
        auto keep = [&](Value old, Value next) { return p.sel(done, old, next); };
        Value now_done = p.either(done, p.sel(series, series_done, cf_done));
        return std::vector<Value>{i, now_done, a, x, series, keep(v[5], term), keep(v[6], sum),
                                  keep(v[7], bn), keep(v[8], c), keep(v[9], d), keep(v[10], h)};
      });
  Value p_series = o.div(o.mul(prefactor, out[6]), a);
  Value q_fraction = o.mul(prefactor, out[10]);
  Value p = o.sel(use_series, p_series, o.sub(one, q_fraction));
  Value q = o.sel(use_series, o.sub(one, p_series), q_fraction);
  return {o.sel(uniform, p_uniform, p), o.sel(uniform, q_uniform, q)};
}

// igamma (upper = false) or igammac (upper = true), with CPU's edge cases:
// in order, a < 0 or x < 0 -> NaN; a = 0 -> (x > 0 ? 1 : NaN) for P; x = 0
// -> 0; a = inf -> (x = inf ? NaN : 0); x = inf -> 1; then NaN propagates
// (Q mirrors the values).
void register_incomplete_gamma(const std::string& name, bool upper) {
  register_lowering("aten::" + name, [name, upper](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(type), "\"", name, "_cpu\" not implemented for '",
                                c10::toString(type), "'");
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    Value a = convert(b, xs[0], at::kDouble), x = convert(b, xs[1], at::kDouble);
    Ops o{b, a};
    Value zero = o.c(0.0), inf = o.c(INFINITY), nan = o.c(NAN);
    Value valid = o.both(o.both(o.gt(a, zero), o.gt(x, zero)), o.both(o.lt(a, inf), o.lt(x, inf)));
    auto [p, q] = incomplete_gamma(o, o.sel(valid, a, o.c(1.0)), o.sel(valid, x, o.c(1.0)));
    double low = upper ? 1.0 : 0.0, high = upper ? 0.0 : 1.0;  // the values at x = 0 and x = inf
    Value r = o.sel(valid, upper ? q : p, nan);
    r = o.sel(o.eq(x, inf), o.c(high), r);
    r = o.sel(o.eq(a, inf), o.sel(o.eq(x, inf), nan, o.c(low)), r);
    r = o.sel(o.eq(x, zero), o.c(low), r);
    r = o.sel(o.eq(a, zero), o.sel(o.gt(x, zero), o.c(high), nan), r);
    r = o.sel(o.either(o.lt(a, zero), o.lt(x, zero)), nan, r);
    return std::vector<Value>{convert(b, r, type)};
  }, {"aten::" + name + "_", "aten::" + name + ".out"});
}

LoweringRegistrar registrar([] {
  register_incomplete_gamma("igamma", false);
  register_incomplete_gamma("igammac", true);
});

}  // namespace
}  // namespace torch_pjrt::ops
