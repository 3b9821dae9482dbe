// torch.special.airy_ai: the Airy function Ai on the real line, in float64
// rounded once.
//
// For -2.5 <= x <= 1.5, its Maclaurin series Ai = c1 f - c2 g with
// f = sum 3^k (1/3)_k x^3k / (3k)!, g = sum 3^k (2/3)_k x^(3k+1) / (3k+1)!,
// c1 = Ai(0), c2 = -Ai'(0). Outside, Ai through the Bessel functions of
// order 1/3 of zeta = 2/3 |x|^(3/2):
//   Ai(x)  = sqrt(x/3) K_1/3(zeta) / pi,
//   Ai(-x) = sqrt(x)/2 (J_1/3(zeta) - Y_1/3(zeta)/sqrt(3)) = sqrt(x/3) Re(e^(i pi/6) H^(1)_1/3(zeta)),
// and both from one integral: with t = 2 asinh(w / sqrt(2z)) in
// K_nu(z) = Int_0^inf e^(-z cosh t) cosh(nu t) dt,
//   e^z K_nu(z) = 2/sqrt(2z) Int_0^inf e^-w^2 cosh(2 nu asinh(y)) / sqrt(1 + y^2) dw,
// y = w / sqrt(2z), for real z = zeta and (as H^(1)_nu(x) = 2/(pi i)
// e^(-i nu pi/2) K_nu(-ix)) for z = -i zeta. The integrand is e^-w^2 times a
// function analytic in a strip of half-width ~sqrt(zeta), so the trapezoid
// rule with step 0.2 on [0, 6.4] reaches float64 rounding for every zeta
// past the switch (asinh's order 1/3 power has no branch point on the path
// the way u^(-1/6) in Poisson's form would).
#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/trapezoid.h"

namespace torch_pjrt::ops {
namespace {

using Ops = Arith;

constexpr double kNu = 1.0 / 3.0;

// Large arguments: integrals by the trapezoid rule (trapezoid.h).
using Grid = TrapezoidGrid;

// Maclaurin series of Ai, 16 terms of f and g (|x|^3 <= 15.7: the last
// terms are below 1e-30).
Value airy_series(const Ops& o, Value x) {
  double c1 = 1.0 / (std::pow(3.0, 2.0 / 3.0) * std::tgamma(2.0 / 3.0));
  double c2 = 1.0 / (std::pow(3.0, 1.0 / 3.0) * std::tgamma(1.0 / 3.0));
  Value x3 = o.mul(o.mul(x, x), x);
  Value tf = o.c(1.0), tg = x;
  Value f = tf, g = tg;
  for (int k = 0; k < 15; ++k) {
    tf = o.mul(tf, o.div(x3, o.c(double(3 * k + 2) * double(3 * k + 3))));
    tg = o.mul(tg, o.div(x3, o.c(double(3 * k + 3) * double(3 * k + 4))));
    f = o.add(f, tf);
    g = o.add(g, tg);
  }
  return o.sub(o.mul(o.c(c1), f), o.mul(o.c(c2), g));
}

// Ai(x) for x > 0: e^-zeta x^(-1/4) S / pi, S = the integral above at z = zeta
// (the prefactors of sqrt(x/3) K / pi collapse since zeta = 2/3 x^(3/2)).
Value airy_positive(const Ops& o, Value x, Value zeta) {
  Grid gr = trapezoid_grid(o.b, zeta);
  const Ops& g = gr.o;
  Value y = g.mul(gr.w, g.rsqrt(g.add(gr.x, gr.x)));  // w / sqrt(2 zeta)
  Value r = g.sqrt(g.add(g.c(1.0), g.mul(y, y)));
  Value e = g.exp(g.mul(g.c(2.0 * kNu), g.log(g.add(y, r))));  // e^(2 nu asinh(y))
  Value cosh = g.mul(g.c(0.5), g.add(e, g.div(g.c(1.0), e)));
  Value sum = node_sum(gr, g.div(cosh, r));
  Value quarter = o.rsqrt(o.sqrt(x));  // x^(-1/4)
  return o.mul(o.mul(o.exp(o.neg(zeta)), quarter), o.mul(sum, o.c(1.0 / M_PI)));
}

// Ai(-x) for x > 0: 2/pi x^(-1/4) Re(e^(i (zeta - pi/4)) S), S the integral
// at z = -i zeta, in real arithmetic: y = r e^(i pi/4), r = w / sqrt(2 zeta),
// 1 + y^2 = 1 + i s (s = r^2) = rho e^(i phi), sqrt(1 + y^2) = sqrt(rho)
// (cos(phi/2) + i sin(phi/2)); q = y + sqrt(1 + y^2) = |q| e^(i theta) and
// cosh(2 nu asinh y) = (q^(2 nu) + q^(-2 nu)) / 2.
Value airy_negative(const Ops& o, Value x, Value zeta) {
  Builder& b = o.b;
  Grid gr = trapezoid_grid(o.b, zeta);
  const Ops& g = gr.o;
  Value r = g.mul(gr.w, g.rsqrt(g.add(gr.x, gr.x)));
  Value s = g.mul(r, r);
  Value rho = g.sqrt(g.add(g.c(1.0), g.mul(s, s)));
  Value cs = g.sqrt(g.mul(g.add(g.c(1.0), g.div(g.c(1.0), rho)), g.c(0.5)));
  Value sn = g.div(s, g.mul(g.c(2.0), g.mul(rho, cs)));
  Value root = g.sqrt(rho);
  Value yr = g.mul(r, g.c(M_SQRT1_2));
  Value qr = g.add(yr, g.mul(root, cs)), qi = g.add(yr, g.mul(root, sn));
  // |q|^(2 nu) and 2 nu theta.
  Value m = g.exp(g.mul(g.c(kNu), g.log(g.add(g.mul(qr, qr), g.mul(qi, qi)))));
  Value angle = g.mul(g.c(2.0 * kNu), b.binary("atan2", qi, qr));
  Value inv_m = g.div(g.c(1.0), m);
  Value cr = g.mul(g.mul(g.c(0.5), g.add(m, inv_m)), b.unary("cosine", angle));
  Value ci = g.mul(g.mul(g.c(0.5), g.sub(m, inv_m)), b.unary("sine", angle));
  // Divided by sqrt(1 + y^2): times rho^(-1/2) (cos(phi/2) - i sin(phi/2)).
  Value re = node_sum(gr, g.div(g.add(g.mul(cr, cs), g.mul(ci, sn)), root));
  Value im = node_sum(gr, g.div(g.sub(g.mul(ci, cs), g.mul(cr, sn)), root));
  Value cz = b.unary("cosine", zeta), sz = b.unary("sine", zeta);
  Value cw = o.mul(o.add(cz, sz), o.c(M_SQRT1_2));  // cos(zeta - pi/4)
  Value sw = o.mul(o.sub(sz, cz), o.c(M_SQRT1_2));  // sin(zeta - pi/4)
  Value quarter = o.rsqrt(o.sqrt(x));
  return o.mul(o.mul(o.c(2.0 / M_PI), quarter), o.sub(o.mul(re, cw), o.mul(im, sw)));
}

Value airy_ai(const Ops& o, Value x) {
  using hlo::Compare;
  Value ax = o.b.unary("abs", x);
  Value pos = o.cmp(x, o.c(1.5), Compare::kGt), neg = o.cmp(x, o.c(-2.5), Compare::kLt);
  Value mid = o.sel(o.b.binary("or", pos, neg), o.c(0.0), x);
  Value far = o.sel(o.b.binary("or", pos, neg), ax, o.c(4.0));  // keeps both branches finite
  Value zeta = o.mul(o.c(2.0 / 3.0), o.mul(far, o.sqrt(far)));
  Value r = o.sel(pos, airy_positive(o, far, zeta),
                  o.sel(neg, airy_negative(o, far, zeta), airy_series(o, mid)));
  // Ai(+-inf) is NaN on CPU.
  return o.sel(o.cmp(ax, o.c(INFINITY), Compare::kEq), o.c(NAN), r);
}

LoweringRegistrar registrar([] {
  register_lowering("aten::special_airy_ai", [](LoweringContext& ctx) {
    c10::ScalarType type = float_type(ctx.dtype(0));
    TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble,
                                "\"airy_ai_cpu\" not implemented for '", c10::toString(type), "'");
    Value x = convert(ctx.b, ctx.tensor(0), at::kDouble);
    return std::vector<Value>{convert(ctx.b, airy_ai(Ops{ctx.b, x}, x), type)};
  }, {"aten::special_airy_ai.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
