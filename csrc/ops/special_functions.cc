// Special functions and float bit-level ops torch defines beyond the common
// unary math: erfc, exp2, the normal quantile ndtri, the scaled
// complementary error function erfcx, Hurwitz zeta, the scaled modified
// Bessel function i1e and i1, signbit, frexp, nextafter, and gcd.
//
// Where float32 would lose digits to cancellation (ndtri near 0 and 1,
// erfcx's exp(x^2) erfc(x)), the math runs in float64 and rounds once.
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

using Fn = std::function<Value(Builder&, Value)>;

Value splat(Builder& b, double v, Value like) {
  return b.splat(b.constant(v, b.element_type(like)), b.dims(like));
}

Value is_nan(Builder& b, Value x) { return b.compare(x, x, hlo::Compare::kNe); }

// A float-only unary op (integers and bool compute in the default float
// dtype); `wide` computes float32 and narrower in float64.
void unary(const std::string& name, bool wide, const Fn& fn) {
  register_lowering("aten::" + name, [fn, wide](LoweringContext& ctx) {
    c10::ScalarType type = float_type(ctx.dtype(0));
    c10::ScalarType compute = wide && type != at::kDouble ? at::kDouble : opmath_type(type);
    Value x = convert(ctx.b, ctx.tensor(0), compute);
    return std::vector<Value>{convert(ctx.b, fn(ctx.b, x), type)};
  }, {"aten::" + name + "_", "aten::" + name + ".out"});
}

// The integer type as wide as a float type, for its bits.
ElementType bits_type(ElementType t) {
  switch (pjrt::byte_width(t)) {
    case 8: return ElementType::kS64;
    case 4: return ElementType::kS32;
    default: return ElementType::kS16;
  }
}

// erfcx(x) = exp(x^2) erfc(x), in float64. Past x = 25, where exp(x^2)
// overflows first, its asymptotic series 1/(x sqrt(pi)) (1 - 1/(2x^2) +
// 3/(4x^4) - 15/(8x^6)); below zero, 2 exp(x^2) - erfcx(-x).
Value erfcx(Builder& b, Value x) {
  Value ax = b.unary("abs", x);
  Value x2 = b.binary("multiply", ax, ax);
  Value direct = b.binary("multiply", b.unary("exponential", x2), b.unary("chlo.erfc", ax));
  Value inv = b.binary("divide", splat(b, 1.0, x), x2);  // 1 / x^2
  Value series = splat(b, -15.0 / 8.0, x);
  series = b.binary("add", b.binary("multiply", series, inv), splat(b, 3.0 / 4.0, x));
  series = b.binary("add", b.binary("multiply", series, inv), splat(b, -0.5, x));
  series = b.binary("add", b.binary("multiply", series, inv), splat(b, 1.0, x));
  Value asym = b.binary("divide", series, b.binary("multiply", ax, splat(b, std::sqrt(M_PI), x)));
  Value positive = b.select(b.compare(ax, splat(b, 25.0, x), hlo::Compare::kGt), asym, direct);
  Value negative = b.binary("subtract", b.binary("multiply", splat(b, 2.0, x),
                                                 b.unary("exponential", x2)), positive);
  return b.select(b.compare(x, b.zeros(b.type(x)), hlo::Compare::kLt), negative, positive);
}

// The scaled modified Bessel functions e^-|x| I_nu(|x|), nu = 0 or 1, in
// float64: the power series sum_k (x/2)^(2k+nu) / (k! (k+nu)!) up to |x| =
// 30 (60 terms), past it the asymptotic series e^x / sqrt(2 pi x) sum_k
// (-1)^k a_k / x^k, a_k = prod_{j<=k} (4 nu^2 - (2j-1)^2) / (k! 8^k)
// (12 terms). Returns the scaled value for |x|.
Value scaled_bessel_i(Builder& b, Value x, int nu) {
  Value ax = b.unary("abs", x);
  Value one = splat(b, 1.0, ax);
  Value q = b.binary("multiply", b.binary("multiply", ax, ax), splat(b, 0.25, ax));
  Value term = nu == 0 ? one : b.binary("multiply", ax, splat(b, 0.5, ax));
  Value sum = term;
  for (int k = 1; k <= 60; ++k) {
    term = b.binary("divide", b.binary("multiply", term, q), splat(b, double(k) * double(k + nu), ax));
    sum = b.binary("add", sum, term);
  }
  Value series = b.binary("multiply", sum, b.unary("exponential", b.unary("negate", ax)));
  Value inv = b.binary("divide", one, ax);
  Value a = one, asym = one;
  for (int k = 1; k <= 12; ++k) {
    double factor = -(4.0 * nu * nu - double(2 * k - 1) * double(2 * k - 1)) / (8.0 * k);
    a = b.binary("multiply", b.binary("multiply", a, inv), splat(b, factor, ax));
    asym = b.binary("add", asym, a);
  }
  asym = b.binary("divide", asym, b.unary("sqrt", b.binary("multiply", ax, splat(b, 2.0 * M_PI, ax))));
  return b.select(b.compare(ax, splat(b, 30.0, ax), hlo::Compare::kGt), asym, series);
}

// I_nu(x) itself: the scaled value times e^|x|; odd for nu = 1.
Value bessel_i(Builder& b, Value x, int nu) {
  Value r = b.binary("multiply", scaled_bessel_i(b, x, nu), b.unary("exponential", b.unary("abs", x)));
  if (nu == 1) r = b.select(b.compare(x, b.zeros(b.type(x)), hlo::Compare::kLt), b.unary("negate", r), r);
  return r;
}

LoweringRegistrar registrar([] {
  unary("erfc", false, [](Builder& b, Value x) { return b.unary("chlo.erfc", x); });
  unary("exp2", false, [](Builder& b, Value x) { return b.binary("power", splat(b, 2.0, x), x); });
  // ndtri(p) = sqrt(2) erfinv(2p - 1).
  unary("special_ndtri", true, [](Builder& b, Value p) {
    Value y = b.binary("subtract", b.binary("add", p, p), splat(b, 1.0, p));
    return b.binary("multiply", splat(b, M_SQRT2, p), b.unary("chlo.erf_inv", y));
  });
  unary("special_erfcx", true, erfcx);
  unary("i0", true, [](Builder& b, Value x) { return bessel_i(b, x, 0); });
  unary("special_modified_bessel_i0", true, [](Builder& b, Value x) { return bessel_i(b, x, 0); });
  unary("special_modified_bessel_i1", true, [](Builder& b, Value x) { return bessel_i(b, x, 1); });
  unary("special_i0e", true, [](Builder& b, Value x) { return scaled_bessel_i(b, x, 0); });
  unary("special_i1e", false, [](Builder& b, Value x) { return b.unary("chlo.bessel_i1e", x); });
  unary("special_i1", false, [](Builder& b, Value x) {
    return b.binary("multiply", b.unary("chlo.bessel_i1e", x), b.unary("exponential", b.unary("abs", x)));
  });

  // zeta(x, q): Hurwitz's zeta, float math on both.
  register_lowering("aten::special_zeta", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = float_type(result_type(ctx, {0, 1}));
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, opmath_type(type));
    Value x = xs[0], q = xs[1];
    Value r = b.binary("chlo.zeta", x, q);
    // q a pole (0, -1, ...): infinity for x > 1, as torch's (XLA: NaN).
    Value pole = b.binary("and", b.compare(q, b.zeros(b.type(q)), hlo::Compare::kLe),
                          b.compare(b.unary("floor", q), q, hlo::Compare::kEq));
    pole = b.binary("and", pole, b.compare(x, splat(b, 1.0, x), hlo::Compare::kGt));
    r = b.select(pole, splat(b, INFINITY, r), r);
    // x < 1 is outside the domain: NaN, whatever q is.
    r = b.select(b.compare(x, splat(b, 1.0, x), hlo::Compare::kLt), splat(b, NAN, r), r);
    return std::vector<Value>{convert(b, r, type)};
  }, {"aten::special_zeta.out"});

  // signbit: the sign bit of floats (so -0.0 and -NaN count), x < 0 else.
  register_lowering("aten::signbit", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    ElementType t = b.element_type(x);
    if (t == ElementType::kPred || hlo::is_unsigned_int(t)) {
      return std::vector<Value>{b.splat(b.constant_bool(false), b.dims(x))};
    }
    if (hlo::is_float(t)) x = b.bitcast_convert(x, bits_type(t));
    return std::vector<Value>{b.compare(x, b.zeros(b.type(x)), hlo::Compare::kLt)};
  }, {"aten::signbit.out"});

  // frexp(x) -> (mantissa, exponent): x = mantissa * 2^exponent with
  // |mantissa| in [0.5, 1); zero, infinity and NaN give (x, 0).
  register_lowering("aten::frexp.Tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(c10::isFloatingType(type), "torch.frexp() only supports floating-point dtypes");
    bool f64 = type == at::kDouble;
    Value x = convert(b, ctx.tensor(0), f64 ? at::kDouble : at::kFloat);
    ElementType it = f64 ? ElementType::kS64 : ElementType::kS32;
    int mantissa_bits = f64 ? 52 : 23;
    int64_t exp_mask = f64 ? 0x7ff : 0xff, bias_minus_one = f64 ? 1022 : 126;
    auto ic = [&](int64_t v) { return b.splat(b.constant_int(v, it), b.dims(x)); };
    Value bits = b.bitcast_convert(x, it);
    Value biased = b.binary("and", b.binary("shift_right_logical", bits, ic(mantissa_bits)), ic(exp_mask));
    Value exponent = b.binary("subtract", biased, ic(bias_minus_one));
    // Keep sign and fraction, set the exponent field to that of 0.5.
    int64_t width = f64 ? 64 : 32;
    // Bit patterns as the signed integers of the float's width.
    int64_t keep = f64 ? static_cast<int64_t>(0x800fffffffffffffULL)
                       : static_cast<int32_t>(static_cast<uint32_t>(0x807fffffu));
    int64_t fraction = f64 ? 0x000fffffffffffffLL : 0x007fffff;
    int64_t sign = f64 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min();
    int64_t half = f64 ? 0x3fe0000000000000LL : 0x3f000000;
    Value m_bits = b.binary("or", b.binary("and", bits, ic(keep)), ic(half));
    // Subnormals, from their bits alone (the plugin may flush them to zero
    // in arithmetic): the fraction's leading one becomes the implicit bit.
    Value f = b.binary("and", bits, ic(fraction));
    Value clz = b.unary("count_leading_zeros", f);
    Value sub_exponent = b.binary("subtract", ic(width - 1 - (f64 ? 1073 : 148)), clz);
    Value shifted = b.binary("shift_left", f, b.binary("subtract", clz, ic(width - 1 - mantissa_bits)));
    Value sub_bits = b.binary("or", b.binary("or", b.binary("and", shifted, ic(fraction)), ic(half)),
                              b.binary("and", bits, ic(sign)));
    Value subnormal = b.binary("and", b.compare(biased, ic(0), hlo::Compare::kEq),
                               b.compare(f, ic(0), hlo::Compare::kNe));
    exponent = b.select(subnormal, sub_exponent, exponent);
    m_bits = b.select(subnormal, sub_bits, m_bits);
    Value mantissa = b.bitcast_convert(m_bits, b.element_type(x));
    // Zero (of either sign, by its bits), infinity and NaN give (x, 0).
    Value zero_bits = b.binary("and", b.compare(biased, ic(0), hlo::Compare::kEq),
                               b.compare(f, ic(0), hlo::Compare::kEq));
    Value special = b.binary("or", zero_bits,
                             b.compare(biased, ic(exp_mask), hlo::Compare::kEq));
    mantissa = b.select(special, x, mantissa);
    exponent = b.select(special, ic(0), exponent);
    return std::vector<Value>{convert(b, mantissa, type), b.convert(exponent, ElementType::kS32)};
  }, {"aten::frexp.Tensor_out"});

  // nextafter(x, y): the next float after x toward y, from x's bits.
  register_lowering("aten::nextafter", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    TORCH_CHECK(c10::isFloatingType(type), "\"nextafter_cpu\" not implemented for '",
                c10::toString(type), "'");
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    Value x = xs[0], y = xs[1];
    ElementType it = bits_type(b.element_type(x));
    auto ic = [&](int64_t v) { return b.splat(b.constant_int(v, it), b.dims(x)); };
    Value zero = b.zeros(b.type(x));
    Value bits = b.bitcast_convert(x, it);
    // Away from zero when moving toward y goes away from zero.
    Value up = b.compare(b.compare(x, y, hlo::Compare::kLt), b.compare(x, zero, hlo::Compare::kGt),
                         hlo::Compare::kEq);
    Value stepped = b.bitcast_convert(b.select(up, b.binary("add", bits, ic(1)),
                                               b.binary("subtract", bits, ic(1))),
                                      b.element_type(x));
    // From zero: the smallest subnormal with y's sign.
    Value smallest = b.bitcast_convert(ic(1), b.element_type(x));
    Value from_zero = b.select(b.compare(y, zero, hlo::Compare::kLt), b.unary("negate", smallest), smallest);
    Value r = b.select(b.compare(x, zero, hlo::Compare::kEq), from_zero, stepped);
    r = b.select(b.compare(x, y, hlo::Compare::kEq), y, r);
    r = b.select(b.binary("or", is_nan(b, x), is_nan(b, y)), b.binary("add", x, y), r);
    return std::vector<Value>{r};
  }, {"aten::nextafter_", "aten::nextafter.out"});

  // gcd(a, b) of integers, Euclid's way on |a| and |b| as torch's kernel
  // (so gcd(INT_MIN, n) follows its two's-complement result).
  register_lowering("aten::gcd", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    TORCH_CHECK(c10::isIntegralType(type, /*includeBool=*/false), "\"gcd_cpu\" not implemented for '",
                c10::toString(type), "'");
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    Value a = b.unary("abs", xs[0]), c = b.unary("abs", xs[1]);
    std::vector<int64_t> all = all_dims(b.type(a).rank());
    auto out = b.while_loop(
        {a, c},
        [&all](Builder& r, const std::vector<Value>& v) {
          Value going = r.compare(v[0], r.zeros(r.type(v[0])), hlo::Compare::kNe);
          return std::vector<Value>{reduce(r, going, all, ReduceKind::kOr)};
        },
        [](Builder& r, const std::vector<Value>& v) {
          Value zero = r.zeros(r.type(v[0]));
          Value going = r.compare(v[0], zero, hlo::Compare::kNe);
          Value safe = r.select(going, v[0], r.splat(r.constant_int(1, r.element_type(v[0])), r.dims(v[0])));
          Value rem = r.binary("remainder", v[1], safe);
          return std::vector<Value>{r.select(going, rem, v[0]), r.select(going, v[0], v[1])};
        });
    return std::vector<Value>{out[1]};
  }, {"aten::gcd_", "aten::gcd.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
