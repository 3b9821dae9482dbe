// torch.special's Bessel functions of order 0 and 1 on the real line: J0,
// J1, Y0, Y1, K0, K1, the scaled e^x K0 and e^x K1, and the spherical j0.
//
// All run in float64 and round once. Near zero, the power series (J, Y, K
// and I of orders 0 and 1 from their standard definitions). Past a switch
// point (3 for J and Y, 2 for K), Poisson's integral
//   K_nu(z) = sqrt(pi/(2z)) e^-z / Gamma(nu+1/2)
//             * Int_0^inf e^-u u^(nu-1/2) (1 + u/(2z))^(nu-1/2) du,
// at z = x for K and, as H^(1)_nu(x) = 2/(pi i) e^(-i nu pi/2) K_nu(-ix), at
// z = -ix for J + iY. After u = w^2 its integrand is e^-w^2
// times a function analytic in a strip of half-width ~sqrt(x) about the real
// axis, so the trapezoid rule with step 0.2 on [0, 6.4] reaches float64
// rounding for every x past the switch, up to infinity: no asymptotic series
// to truncate, no cancellation.
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/trapezoid.h"

namespace torch_pjrt::ops {
namespace {

constexpr double kEulerGamma = 0.57721566490153286061;

// Elementwise float64 arithmetic on values shaped like `like`.
using Ops = Arith;

// Large arguments: integrals by the trapezoid rule (trapezoid.h).
using Grid = TrapezoidGrid;

// P + iQ of the Hankel expansion H^(1)_nu(x) = sqrt(2/(pi x)) e^(i omega)
// (P + iQ), omega = x - nu pi/2 - pi/4, for x > 0:
//   P + iQ = 2/sqrt(pi) Int_0^inf e^-w^2 g(w) dw, s = w^2/(2x),
//   g = (1 + is)^(-1/2) (nu = 0), (1 + 2is) (1 + is)^(-1/2) (nu = 1).
// With 1 + is = rho e^(i phi): (1 + is)^(-1/2) = rho^(-1/2) (cos(phi/2) -
// i sin(phi/2)), cos(phi/2) = sqrt((1 + 1/rho)/2), sin(phi/2) = s / (2 rho
// cos(phi/2)) (no cancellation for small s).
std::pair<Value, Value> hankel_pq(const Ops& o, Value x, int nu) {
  Grid gr = trapezoid_grid(o.b, x);
  const Ops& g = gr.o;
  Value s = g.div(gr.w2, g.add(gr.x, gr.x));
  Value rho = g.sqrt(g.add(g.c(1.0), g.mul(s, s)));
  Value cs = g.sqrt(g.mul(g.add(g.c(1.0), g.div(g.c(1.0), rho)), g.c(0.5)));
  Value sn = g.div(s, g.mul(g.c(2.0), g.mul(rho, cs)));
  Value scale = g.rsqrt(rho);
  Value gr_re = cs, gr_im = g.neg(sn);
  if (nu == 1) {
    Value two_s = g.add(s, s);
    gr_re = g.add(cs, g.mul(two_s, sn));
    gr_im = g.sub(g.mul(two_s, cs), sn);
  }
  Value re = node_sum(gr, g.mul(scale, gr_re)), im = node_sum(gr, g.mul(scale, gr_im));
  double k = 2.0 / std::sqrt(M_PI);
  return {o.mul(re, o.c(k)), o.mul(im, o.c(k))};
}

// J_nu(x) and Y_nu(x) for x > 0 from P and Q. cos and sin of omega come
// from those of x (exact shifts by multiples of pi/4).
std::pair<Value, Value> hankel_jy(const Ops& o, Value x, int nu) {
  auto [p, q] = hankel_pq(o, x, nu);
  Value cx = o.b.unary("cosine", x), sx = o.b.unary("sine", x);
  Value r2 = o.c(M_SQRT1_2);
  Value cw = nu == 0 ? o.mul(o.add(cx, sx), r2) : o.mul(o.sub(sx, cx), r2);
  Value sw = nu == 0 ? o.mul(o.sub(sx, cx), r2) : o.neg(o.mul(o.add(sx, cx), r2));
  Value amp = o.sqrt(o.div(o.c(2.0 / M_PI), x));
  Value j = o.mul(amp, o.sub(o.mul(p, cw), o.mul(q, sw)));
  Value y = o.mul(amp, o.add(o.mul(p, sw), o.mul(q, cw)));
  return {j, y};
}

// e^x K_nu(x) for x > 0: sqrt(2/x) Int_0^inf e^-w^2 g(w) dw with t = w^2/(2x),
// g = (1 + t)^(-1/2) (nu = 0), (1 + 2t) (1 + t)^(-1/2) (nu = 1).
Value scaled_k_integral(const Ops& o, Value x, int nu) {
  Grid gr = trapezoid_grid(o.b, x);
  const Ops& g = gr.o;
  Value t = g.div(gr.w2, g.add(gr.x, gr.x));
  Value f = g.rsqrt(g.add(g.c(1.0), t));
  if (nu == 1) f = g.mul(f, g.add(g.c(1.0), g.add(t, t)));
  return o.mul(o.sqrt(o.div(o.c(2.0), x)), node_sum(gr, f));
}

// Power series in q = +-x^2/4: plain = sum_k q^k / (k! (k+nu)!) and
// weighted = sum_k c_k q^k / (k! (k+nu)!), 20 terms (|q| <= 2.25 here, the
// last term below 1e-25).
struct Series {
  Value plain, weighted;
};
Series power_series(const Ops& o, Value q, int nu, const std::function<double(int)>& c) {
  Value term = o.c(1.0);  // 1 / nu!, nu = 0 or 1
  Series s{term, o.mul(term, o.c(c(0)))};
  for (int k = 1; k < 20; ++k) {
    term = o.mul(term, o.div(q, o.c(double(k) * double(k + nu))));
    s.plain = o.add(s.plain, term);
    if (c(k) != 0.0) s.weighted = o.add(s.weighted, o.mul(term, o.c(c(k))));
  }
  return s;
}

// H_k = 1 + 1/2 + ... + 1/k, and psi(k + 1) = H_k - gamma.
double harmonic(int k) {
  double h = 0.0;
  for (int j = 1; j <= k; ++j) h += 1.0 / j;
  return h;
}
double psi1(int k) { return harmonic(k) - kEulerGamma; }  // psi(k + 1)

// J_nu and Y_nu (nu = 0, 1) by series for x (signed for J; Y's logarithm
// makes negative x NaN by itself).
std::pair<Value, Value> series_jy(const Ops& o, Value x, int nu) {
  Value half = o.mul(x, o.c(0.5));
  Value q = o.neg(o.mul(half, half));
  Value log_half = o.log(half);
  if (nu == 0) {
    Series s = power_series(o, q, 0, [](int k) { return harmonic(k); });
    Value j = s.plain;
    Value y = o.mul(o.c(2.0 / M_PI),
                    o.sub(o.mul(o.add(log_half, o.c(kEulerGamma)), j), s.weighted));
    return {j, y};
  }
  Series s = power_series(o, q, 1, [](int k) { return psi1(k) + psi1(k + 1); });
  Value j = o.mul(half, s.plain);
  Value y = o.sub(o.mul(o.c(2.0 / M_PI), o.mul(log_half, j)),
                  o.add(o.div(o.c(2.0 / M_PI), x), o.mul(o.div(half, o.c(M_PI)), s.weighted)));
  return {j, y};
}

// K_nu (nu = 0, 1) by series, x > 0.
Value series_k(const Ops& o, Value x, int nu) {
  Value half = o.mul(x, o.c(0.5));
  Value q = o.mul(half, half);
  Value log_half = o.log(half);
  if (nu == 0) {
    Series s = power_series(o, q, 0, [](int k) { return harmonic(k); });
    return o.sub(s.weighted, o.mul(o.add(log_half, o.c(kEulerGamma)), s.plain));
  }
  Series s = power_series(o, q, 1, [](int k) { return psi1(k) + psi1(k + 1); });
  Value i1 = o.mul(half, s.plain);
  return o.sub(o.add(o.div(o.c(1.0), x), o.mul(log_half, i1)),
               o.mul(o.mul(half, o.c(0.5)), s.weighted));
}

constexpr double kJySwitch = 3.0;
constexpr double kKSwitch = 2.0;

Value bessel_j(const Ops& o, Value x, int nu) {
  Value ax = o.abs(x);
  Value small = o.le(ax, o.c(kJySwitch));
  Value far = hankel_jy(o, o.sel(small, o.c(kJySwitch + 1), ax), nu).first;
  if (nu == 1) far = o.sel(o.lt(x, o.c(0.0)), o.neg(far), far);
  // J0(+-inf) and J1(+-inf) are NaN on CPU, as cos(inf) makes them here.
  return o.sel(small, series_jy(o, o.sel(small, x, o.c(1.0)), nu).first, far);
}

Value bessel_y(const Ops& o, Value x, int nu) {
  Value small = o.le(x, o.c(kJySwitch));
  Value far = hankel_jy(o, o.sel(small, o.c(kJySwitch + 1), x), nu).second;
  Value r = o.sel(small, series_jy(o, o.sel(small, x, o.c(1.0)), nu).second, far);
  r = o.sel(o.eq(x, o.c(0.0)), o.c(-INFINITY), r);
  return o.sel(o.lt(x, o.c(0.0)), o.c(NAN), r);
}

// K_nu(x), or e^x K_nu(x) when `scaled`.
Value bessel_k(const Ops& o, Value x, int nu, bool scaled) {
  Value small = o.le(x, o.c(kKSwitch));
  Value xs = o.sel(small, x, o.c(1.0)), xf = o.sel(small, o.c(kKSwitch + 1), x);
  Value near = series_k(o, xs, nu);
  Value far = scaled_k_integral(o, xf, nu);
  if (scaled) {
    near = o.mul(near, o.exp(xs));
  } else {
    far = o.mul(far, o.exp(o.neg(xf)));
  }
  Value r = o.sel(small, near, far);
  r = o.sel(o.eq(x, o.c(0.0)), o.c(INFINITY), r);
  return o.sel(o.lt(x, o.c(0.0)), o.c(NAN), r);
}

// j0(x) = sin(x) / x: 1 at 0, 0 at +-infinity.
Value spherical_j0(const Ops& o, Value x) {
  Value r = o.div(o.b.unary("sine", x), x);
  r = o.sel(o.eq(x, o.c(0.0)), o.c(1.0), r);
  return o.sel(o.is_inf(x), o.c(0.0), r);
}

using Fn = std::function<Value(const Ops&, Value)>;

// A float32/float64 unary op (integers and bool compute in the default
// float dtype; CPU has no half-precision kernels), computed in float64.
void unary(const std::string& name, const Fn& fn) {
  std::string op = "aten::special_" + name;
  register_lowering(op, [fn, name](LoweringContext& ctx) {
    c10::ScalarType type = float_type(ctx.dtype(0));
    TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble, "\"", name,
                                "_cpu\" not implemented for '", c10::toString(type), "'");
    Value x = convert(ctx.b, ctx.tensor(0), at::kDouble);
    return std::vector<Value>{convert(ctx.b, fn(Ops{ctx.b, x}, x), type)};
  }, {op + ".out"});
}

LoweringRegistrar registrar([] {
  unary("bessel_j0", [](const Ops& o, Value x) { return bessel_j(o, x, 0); });
  unary("bessel_j1", [](const Ops& o, Value x) { return bessel_j(o, x, 1); });
  unary("bessel_y0", [](const Ops& o, Value x) { return bessel_y(o, x, 0); });
  unary("bessel_y1", [](const Ops& o, Value x) { return bessel_y(o, x, 1); });
  unary("modified_bessel_k0", [](const Ops& o, Value x) { return bessel_k(o, x, 0, false); });
  unary("modified_bessel_k1", [](const Ops& o, Value x) { return bessel_k(o, x, 1, false); });
  unary("scaled_modified_bessel_k0", [](const Ops& o, Value x) { return bessel_k(o, x, 0, true); });
  unary("scaled_modified_bessel_k1", [](const Ops& o, Value x) { return bessel_k(o, x, 1, true); });
  unary("spherical_bessel_j0", spherical_j0);
});

}  // namespace
}  // namespace torch_pjrt::ops
