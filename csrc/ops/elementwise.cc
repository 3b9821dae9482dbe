// Elementwise math: unary and binary ops with torch's type promotion and
// broadcasting, comparisons, logical ops, where, clamp, masked_fill.
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

using Fn = std::function<Value(Builder&, Value)>;

// A float-only unary op: integer inputs compute in the default float dtype.
void unary_float(const std::string& name, const Fn& fn) {
  register_lowering(
      "aten::" + name,
      [fn](LoweringContext& ctx) {
        c10::ScalarType type = float_type(ctx.dtype(0));
        Value x = convert(ctx.b, ctx.tensor(0), opmath_type(type));
        return std::vector<Value>{convert(ctx.b, fn(ctx.b, x), type)};
      },
      {"aten::" + name + "_", "aten::" + name + ".out"});
}

// A unary op whose result keeps the input dtype.
void unary_same(const std::string& name, const Fn& fn, bool allow_bool = true) {
  register_lowering(
      "aten::" + name,
      [fn, name, allow_bool](LoweringContext& ctx) {
        TORCH_CHECK(allow_bool || ctx.dtype(0) != at::kBool, name,
                    " is not supported for bool tensors");
        return std::vector<Value>{fn(ctx.b, ctx.tensor(0))};
      },
      {"aten::" + name + "_", "aten::" + name + ".out"});
}

Fn op(const char* name) {
  return [name](Builder& b, Value x) { return b.unary(name, x); };
}

Value scalar_like(Builder& b, double v, Value x) {
  return b.splat(b.constant(v, b.element_type(x)), b.dims(x));
}

void register_unary() {
  unary_float("exp", op("exponential"));
  unary_float("expm1", op("exponential_minus_one"));
  unary_float("log", op("log"));
  unary_float("log1p", op("log_plus_one"));
  unary_float("log2", [](Builder& b, Value x) {
    return b.binary("divide", b.unary("log", x), scalar_like(b, std::log(2.0), x));
  });
  unary_float("log10", [](Builder& b, Value x) {
    return b.binary("divide", b.unary("log", x), scalar_like(b, std::log(10.0), x));
  });
  unary_float("sqrt", op("sqrt"));
  unary_float("rsqrt", op("rsqrt"));
  unary_float("sin", op("sine"));
  unary_float("cos", op("cosine"));
  unary_float("tan", op("tan"));
  unary_float("tanh", op("tanh"));
  unary_float("sigmoid", op("logistic"));
  unary_float("asin", op("chlo.asin"));
  unary_float("acos", op("chlo.acos"));
  unary_float("atan", op("chlo.atan"));
  unary_float("sinh", op("chlo.sinh"));
  unary_float("cosh", op("chlo.cosh"));
  unary_float("asinh", op("chlo.asinh"));
  unary_float("acosh", op("chlo.acosh"));
  unary_float("atanh", op("chlo.atanh"));
  unary_float("erf", op("chlo.erf"));
  unary_float("erfinv", op("chlo.erf_inv"));
  unary_float("lgamma", op("chlo.lgamma"));
  unary_float("digamma", op("chlo.digamma"));
  unary_float("reciprocal", [](Builder& b, Value x) {
    return b.binary("divide", scalar_like(b, 1.0, x), x);
  });
  unary_same("neg", op("negate"), /*allow_bool=*/false);
  unary_same("abs", [](Builder& b, Value x) {
    if (hlo::is_complex(b.element_type(x))) {  // |z|, a real number
      Value re = b.real(x), im = b.imag(x);
      return b.unary("sqrt", b.binary("add", b.binary("multiply", re, re),
                                      b.binary("multiply", im, im)));
    }
    return b.element_type(x) == ElementType::kPred || hlo::is_unsigned_int(b.element_type(x))
               ? x
               : b.unary("abs", x);
  });
  // The conjugate, materialized: x.conj() only sets a lazy bit that
  // resolve_conj() and the FFT's Hermitian transforms turn into this op.
  // conj_physical itself is a composite over _conj_physical; a kernel for it
  // on tpu would hide the composite from autograd.
  register_lowering(
      "aten::_conj_physical",
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x = ctx.tensor(0);
        if (!hlo::is_complex(b.element_type(x))) return std::vector<Value>{x};
        return std::vector<Value>{b.complex(b.real(x), b.unary("negate", b.imag(x)))};
      },
      {"aten::conj_physical_", "aten::conj_physical.out"});
  auto sign = [](Builder& b, Value x) {
    ElementType t = b.element_type(x);
    if (t == ElementType::kPred) return x;
    if (hlo::is_unsigned_int(t)) {
      Value zero = b.zeros(TensorType{t, b.dims(x)});
      return b.convert(b.compare(x, zero, hlo::Compare::kNe), t);
    }
    return b.unary("sign", x);
  };
  unary_same("sign", sign);
  // sgn is sign for real numbers (autograd's abs and norm backward use it).
  unary_same("sgn", sign);
  register_lowering("aten::polygamma", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    int64_t n = ctx.int_arg(0);
    TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
    c10::ScalarType type = float_type(ctx.dtype(1));
    Value x = convert(b, ctx.tensor(1), opmath_type(type));
    auto dims = b.dims(x);
    ElementType t = b.element_type(x);
    auto splat = [&](double v) { return b.splat(b.constant(v, t), dims); };
    Value order = splat(static_cast<double>(n));
    Value zero = splat(0.0);
    Value negative = b.compare(x, zero, hlo::Compare::kLt);
    Value r = b.binary("chlo.polygamma", order, x);
    if (n == 1) {
      // XLA's polygamma is inaccurate for negative x (9.80 vs 7.74 at
      // -8.48); trigamma's reflection formula maps them to positive ones:
      // psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x).
      Value one = splat(1.0);
      Value pi = splat(M_PI);
      Value s = b.unary("sine", b.binary("multiply", pi, x));
      Value reflected = b.binary("subtract", b.binary("divide", b.binary("multiply", pi, pi), b.binary("multiply", s, s)),
                                 b.binary("chlo.polygamma", order, b.binary("subtract", one, x)));
      r = b.select(negative, reflected, r);
    } else if (n >= 2) {
      // Also wrong for negative x from n = 2 on, and NaN at the poles. Step
      // each negative x up to [0, 1) with psi_n(x) = psi_n(x + 1) -
      // (-1)^n n! / x^(n+1), then evaluate there. The poles (x a
      // non-positive integer) are (-1)^(n+1) infinity, as torch's.
      double factorial = 1;
      for (int64_t i = 2; i <= n; ++i) factorial *= static_cast<double>(i);
      double coefficient = (n % 2 == 0 ? 1.0 : -1.0) * factorial;
      Value pole = b.binary("and", b.compare(x, splat(0.0), hlo::Compare::kLe),
                            b.compare(b.unary("floor", x), x, hlo::Compare::kEq));
      // At most 2^16 steps: past that the sum is left where it stands.
      Value steps_left = b.constant_int(1 << 16, ElementType::kS64);
      std::vector<int64_t> all = all_dims(static_cast<int64_t>(dims.size()));
      auto loop = b.while_loop(
          {steps_left, x, zero, b.select(pole, zero, x)},
          [&all](Builder& c, const std::vector<Value>& v) {
            Value below = c.compare(v[3], c.zeros(c.type(v[3])), hlo::Compare::kLt);
            Value any = reduce(c, below, all, ReduceKind::kOr);
            Value more = c.compare(v[0], c.constant_int(0, ElementType::kS64), hlo::Compare::kGt);
            return std::vector<Value>{c.binary("and", any, more)};
          },
          [n, coefficient](Builder& c, const std::vector<Value>& v) {
            ElementType et = c.element_type(v[3]);
            const auto& d = c.dims(v[3]);
            Value y = v[3];
            Value below = c.compare(y, c.zeros(c.type(y)), hlo::Compare::kLt);
            Value term = c.binary("divide", c.splat(c.constant(coefficient, et), d),
                                  c.binary("power", y, c.splat(c.constant(static_cast<double>(n + 1), et), d)));
            Value acc = c.select(below, c.binary("add", v[2], term), v[2]);
            Value next = c.select(below, c.binary("add", y, c.splat(c.constant(1.0, et), d)), y);
            Value left = c.binary("subtract", v[0], c.constant_int(1, ElementType::kS64));
            return std::vector<Value>{left, v[1], acc, next};
          });
      Value shifted = b.binary("subtract", b.binary("chlo.polygamma", order, loop[3]), loop[2]);
      r = b.select(negative, shifted, r);
      r = b.select(pole, splat(n % 2 == 1 ? INFINITY : -INFINITY), r);
    }
    return std::vector<Value>{convert(b, r, type)};
  }, {"aten::polygamma.out"});
  // Rounding ops are the identity on integers, as in torch.
  auto rounding = [](const char* hlo_op) {
    return [hlo_op](Builder& b, Value x) {
      return hlo::is_float(b.element_type(x)) ? b.unary(hlo_op, x) : x;
    };
  };
  unary_same("floor", rounding("floor"));
  unary_same("ceil", rounding("ceil"));
  unary_same("round", rounding("round_nearest_even"));
  unary_same("trunc", [](Builder& b, Value x) {
    if (!hlo::is_float(b.element_type(x))) return x;
    return b.binary("multiply", b.unary("sign", x), b.unary("floor", b.unary("abs", x)));
  });
  unary_same("bitwise_not", [](Builder& b, Value x) {
    TORCH_CHECK(!hlo::is_float(b.element_type(x)),
                "bitwise_not is only supported for integer and bool tensors");
    return b.unary("not", x);
  });
  register_lowering(
      "aten::logical_not",
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x = ctx.tensor(0);
        Value zero = b.zeros(TensorType{b.element_type(x), b.dims(x)});
        return std::vector<Value>{b.compare(x, zero, hlo::Compare::kEq)};
      },
      {"aten::logical_not_", "aten::logical_not.out"});
}

// Binary arithmetic on the promoted type of arguments 0 and 1.
using BinaryFn = std::function<Value(LoweringContext&, Value, Value, c10::ScalarType)>;

void binary(const std::string& name, const std::vector<std::string>& overloads, BinaryFn fn,
            bool float_math = false) {
  for (const std::string& overload : overloads) {
    std::string full = "aten::" + name + (overload.empty() ? "" : "." + overload);
    std::string inplace = "aten::" + name + "_" + (overload.empty() ? "" : "." + overload);
    std::vector<std::string> aliases = {inplace};
    if (overload == "Tensor" || overload.empty()) aliases.push_back("aten::" + name + ".out");
    if (overload == "Scalar") aliases.push_back("aten::" + name + ".Scalar_out");
    register_lowering(full, [fn, float_math](LoweringContext& ctx) {
      c10::ScalarType type = result_type(ctx, {0, 1});
      if (float_math) type = float_type(type);
      c10::ScalarType compute = opmath_type(type);
      auto xs = promote_and_broadcast(ctx.b, {ctx.tensor(0), ctx.tensor(1)}, compute);
      return std::vector<Value>{convert(ctx.b, fn(ctx, xs[0], xs[1], compute), type)};
    }, aliases);
  }
}

Value alpha_times(LoweringContext& ctx, Value other, c10::ScalarType type) {
  if (ctx.is_none(2)) return other;
  Builder& b = ctx.b;
  // torch's checks: a bool alpha only for bool results; a float alpha only
  // for floating results.
  TORCH_CHECK(ctx.arg(2).dtype != at::kBool || type == at::kBool,
              "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type) ||
                  ctx.arg(2).dtype != at::kDouble,
              "For integral input tensors, argument alpha must not be a floating point number.");
  if (type == at::kBool) {  // alpha * y for bools: y where alpha is nonzero
    Value a = ctx.scalar(2, et(ctx.arg(2).dtype == at::kBool ? at::kBool : at::kLong));
    Value nonzero = b.compare(a, b.zeros(b.type(a)), hlo::Compare::kNe);
    return b.binary("and", b.splat(nonzero, b.dims(other)), other);
  }
  Value alpha = b.splat(ctx.scalar(2, et(type)), b.dims(other));
  return b.binary("multiply", alpha, other);
}

// Python's modulus: the remainder takes the divisor's sign.
Value python_remainder(Builder& b, Value x, Value y) {
  Value r = b.binary("remainder", x, y);
  Value zero = b.zeros(TensorType{b.element_type(r), b.dims(r)});
  Value r_neg = b.compare(r, zero, hlo::Compare::kLt);
  Value y_neg = b.compare(y, zero, hlo::Compare::kLt);
  Value fix = b.binary("and", b.compare(r, zero, hlo::Compare::kNe),
                       b.compare(r_neg, y_neg, hlo::Compare::kNe));
  return b.select(fix, b.binary("add", r, y), r);
}

void register_binary() {
  binary("add", {"Tensor", "Scalar"}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType t) {
    Builder& b = ctx.b;
    y = alpha_times(ctx, y, t);
    return t == at::kBool ? b.binary("or", x, y) : b.binary("add", x, y);
  });
  binary("sub", {"Tensor", "Scalar"}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType t) {
    TORCH_CHECK(t != at::kBool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
    return ctx.b.binary("subtract", x, alpha_times(ctx, y, t));
  });
  binary("mul", {"Tensor", "Scalar"}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType t) {
    return t == at::kBool ? ctx.b.binary("and", x, y) : ctx.b.binary("multiply", x, y);
  });
  binary("div", {"Tensor", "Scalar"},
         [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
           return ctx.b.binary("divide", x, y);
         },
         /*float_math=*/true);
  // floor_divide(self, other): div(self, other, rounding_mode="floor").
  for (const char* overload : {"", "Scalar"}) {
    bool scalar = *overload != '\0';
    std::string name = std::string("aten::floor_divide") + (scalar ? ".Scalar" : "");
    std::vector<std::string> aliases = {scalar ? "aten::floor_divide_.Scalar"
                                               : "aten::floor_divide_.Tensor",
                                        scalar ? "aten::floor_divide.Scalar_out"
                                               : "aten::floor_divide.out"};
    register_lowering(name, [scalar](LoweringContext& ctx) {
      return delegate(ctx, scalar ? "aten::div.Scalar_mode" : "aten::div.Tensor_mode",
                      {ctx.arg(0), ctx.arg(1), static_arg(c10::IValue(std::string("floor")))});
    }, aliases);
  }
  for (const char* overload : {"Tensor_mode", "Scalar_mode"}) {
    std::string name = std::string("aten::div.") + overload;
    std::vector<std::string> aliases = {std::string("aten::div_.") + overload};
    if (std::string(overload) == "Tensor_mode") aliases.push_back("aten::div.out_mode");
    register_lowering(name, [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = result_type(ctx, {0, 1});
      std::optional<std::string> mode;
      if (!ctx.is_none(2)) mode = ctx.ivalue(2).toStringRef();
      bool exact_int = mode && !c10::isFloatingType(type);
      c10::ScalarType out_type = exact_int ? type : float_type(type);
      c10::ScalarType compute = opmath_type(out_type);
      auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, compute);
      Value x = xs[0], y = xs[1];
      Value zero = b.zeros(TensorType{b.element_type(x), b.dims(x)});
      Value q;
      if (mode && *mode == "floor") {
        if (exact_int) {
          q = b.binary("divide", x, y);  // truncates
          Value r = b.binary("remainder", x, y);
          Value adjust = b.binary(
              "and", b.compare(r, zero, hlo::Compare::kNe),
              b.compare(b.compare(r, zero, hlo::Compare::kLt),
                        b.compare(y, zero, hlo::Compare::kLt), hlo::Compare::kNe));
          Value one = b.splat(b.constant_int(1, b.element_type(q)), b.dims(q));
          q = b.select(adjust, b.binary("subtract", q, one), q);
        } else {
          // torch's floor division: from the remainder, so that q * y + r == x
          // holds as closely as floats allow (Python's semantics).
          Value mod = b.binary("remainder", x, y);
          Value div = b.binary("divide", b.binary("subtract", x, mod), y);
          Value wrong_sign = b.binary("and", b.compare(mod, zero, hlo::Compare::kNe),
                                      b.compare(b.compare(y, zero, hlo::Compare::kLt),
                                                b.compare(mod, zero, hlo::Compare::kLt),
                                                hlo::Compare::kNe));
          Value one = b.splat(b.constant(1.0, b.element_type(div)), b.dims(div));
          div = b.select(wrong_sign, b.binary("subtract", div, one), div);
          Value floored = b.unary("floor", div);
          Value half = b.splat(b.constant(0.5, b.element_type(div)), b.dims(div));
          floored = b.select(b.compare(b.binary("subtract", div, floored), half, hlo::Compare::kGt),
                             b.binary("add", floored, one), floored);
          // A zero quotient takes the sign of the true quotient; x / 0 is
          // the plain division (inf or nan).
          Value plain = b.binary("divide", x, y);
          Value signed_zero = b.binary("multiply", zero, plain);
          floored = b.select(b.compare(div, zero, hlo::Compare::kEq), signed_zero, floored);
          q = b.select(b.compare(y, zero, hlo::Compare::kEq), plain, floored);
        }
      } else if (mode && *mode == "trunc") {
        q = b.binary("divide", x, y);
        if (!exact_int) {
          // torch rounds the quotient to the output dtype before truncating.
          q = convert(b, convert(b, q, out_type), compute);
          q = b.binary("multiply", b.unary("sign", q), b.unary("floor", b.unary("abs", q)));
        }
      } else {
        TORCH_CHECK(!mode, "div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                    "but found '", *mode, "'");
        q = b.binary("divide", x, y);
      }
      return std::vector<Value>{convert(b, q, out_type)};
    }, aliases);
  }
  binary("remainder", {"Tensor", "Scalar"},
         [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
           return python_remainder(ctx.b, x, y);
         });
  // remainder(Scalar self, Tensor other): a Python number's modulus by a tensor.
  register_lowering("aten::remainder.Scalar_Tensor", [](LoweringContext& ctx) {
    c10::ScalarType type = result_type(ctx, {0, 1});
    auto xs = promote_and_broadcast(ctx.b, {ctx.tensor(0), ctx.tensor(1)}, opmath_type(type));
    return std::vector<Value>{convert(ctx.b, python_remainder(ctx.b, xs[0], xs[1]), type)};
  }, {"aten::remainder.Scalar_Tensor_out"});
  binary("fmod", {"Tensor", "Scalar"}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
    return ctx.b.binary("remainder", x, y);
  });
  binary("maximum", {""}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
    return ctx.b.binary("maximum", x, y);
  });
  binary("minimum", {""}, [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
    return ctx.b.binary("minimum", x, y);
  });
  binary("atan2", {""},
         [](LoweringContext& ctx, Value x, Value y, c10::ScalarType) {
           return ctx.b.binary("atan2", x, y);
         },
         /*float_math=*/true);
  for (auto [name, hlo_op] : {std::pair{"bitwise_and", "and"}, std::pair{"bitwise_or", "or"},
                              std::pair{"bitwise_xor", "xor"}}) {
    std::string n = name;
    std::string o = hlo_op;
    binary(n, {"Tensor", "Scalar"}, [n, o](LoweringContext& ctx, Value x, Value y, c10::ScalarType t) {
      TORCH_CHECK(!c10::isFloatingType(t), "\"", n, "_cpu\" not implemented for '", t, "'");
      return ctx.b.binary(o, x, y);
    });
  }
}

void register_shifts() {
  for (auto [name, right] : {std::pair{"__lshift__", false}, std::pair{"__rshift__", true},
                             std::pair{"bitwise_left_shift", false}, std::pair{"bitwise_right_shift", true}}) {
    std::string n = name;
    bool r = right;
    auto lower = [r, n](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = result_type(ctx, {0, 1});
      TORCH_CHECK(c10::isIntegralType(type, false), "\"", n, "\" not implemented for '", type, "'");
      auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
      // torch: shifts by >= the bit width give 0 (or -1 for negative >>).
      const char* op = r ? (c10::isSignedType(type) ? "shift_right_arithmetic" : "shift_right_logical") : "shift_left";
      return std::vector<Value>{b.binary(op, xs[0], xs[1])};
    };
    if (n.rfind("__", 0) == 0) {
      register_lowering("aten::" + n + ".Tensor", lower, {"aten::__i" + n.substr(2) + ".Tensor"});
      register_lowering("aten::" + n + ".Scalar", lower, {"aten::__i" + n.substr(2) + ".Scalar"});
    } else {
      register_lowering("aten::" + n + ".Tensor", lower, {"aten::" + n + "_.Tensor", "aten::" + n + ".Tensor_out"});
    }
  }
}

// The exponents torch's CPU kernel computes without pow.
bool cheap_exponent(double v) {
  return v == 0 || v == 1 || v == 2 || v == 3 || v == 0.5 || v == -0.5 || v == -1 || v == -2;
}

// The exponents the lowering needs to know: the cheap ones, and negative
// integers (an error for integer tensors).
bool special_exponent(const c10::Scalar& e) {
  if (e.isComplex() || e.isBoolean()) return false;
  return (e.isIntegral(false) && e.toLong() < 0) || cheap_exponent(e.toDouble());
}

// x ** e for a special exponent, as torch's kernel forms it (x * x * x for
// 3, 1 / (x * x) for -2), in the type torch computes it in (float32 for the
// 16-bit floats). Empty when torch would not take its special form: complex
// results, float16 to the power +-0.5 (torch's half kernel calls pow there,
// which differs from sqrt at -0 and -inf) and exponents outside the list.
std::optional<Value> pow_by_special_exponent(Builder& b, Value x, c10::ScalarType type, double e) {
  bool real_float = c10::isFloatingType(type);
  if (!cheap_exponent(e) || c10::isComplexType(type) ||
      (!real_float && (e < 0 || e != static_cast<int64_t>(e))) ||
      (type == c10::kHalf && (e == 0.5 || e == -0.5))) {
    return std::nullopt;
  }
  c10::ScalarType math = opmath_type(type);
  Value v = convert(b, x, math);
  auto one = [&] { return b.splat(b.constant(1.0, et(math)), b.dims(v)); };
  Value r;
  if (e == 0) {
    r = one();  // torch: 1 everywhere, nan included
  } else if (e == 1) {
    r = v;
  } else if (e == 2) {
    r = b.binary("multiply", v, v);
  } else if (e == 3) {
    r = b.binary("multiply", b.binary("multiply", v, v), v);
  } else if (e == 0.5) {
    r = b.unary("sqrt", v);
  } else if (e == -0.5) {
    r = b.unary("rsqrt", v);
  } else if (e == -1) {
    r = b.binary("divide", one(), v);
  } else {  // -2
    r = b.binary("divide", one(), b.binary("multiply", v, v));
  }
  return convert(b, r, type);
}

void register_pow() {
  auto lower = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    const LoweringArg& exponent = ctx.arg(1);
    if (exponent.kind == LoweringArg::Kind::kScalar && exponent.value.isScalar()) {
      c10::Scalar e = exponent.value.toScalar();
      TORCH_CHECK(!(c10::isIntegralType(type, /*includeBool=*/true) && e.isIntegral(false) &&
                    e.toLong() < 0),
                  "Integers to negative integer powers are not allowed.");
      Value x = promote_and_broadcast(b, {ctx.tensor(0)}, type)[0];
      if (auto r = pow_by_special_exponent(b, x, type, e.toDouble())) {
        return std::vector<Value>{*r};
      }
    }
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    return std::vector<Value>{b.binary("power", xs[0], xs[1])};
  };
  register_lowering("aten::pow.Tensor_Tensor", lower,
                    {"aten::pow_.Tensor", "aten::pow.Tensor_Tensor_out"});
  register_lowering("aten::pow.Tensor_Scalar", lower,
                    {"aten::pow_.Scalar", "aten::pow.Tensor_Scalar_out"});
  specialize_scalar("aten::pow.Tensor_Scalar", 1, special_exponent);
  register_lowering("aten::pow.Scalar", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    return std::vector<Value>{b.binary("power", xs[0], xs[1])};
  }, {"aten::pow.Scalar_out"});
}

void register_comparisons() {
  for (auto [name, dir] : {std::pair{"eq", hlo::Compare::kEq}, std::pair{"ne", hlo::Compare::kNe},
                           std::pair{"lt", hlo::Compare::kLt}, std::pair{"le", hlo::Compare::kLe},
                           std::pair{"gt", hlo::Compare::kGt}, std::pair{"ge", hlo::Compare::kGe}}) {
    hlo::Compare direction = dir;
    auto lower = [direction](LoweringContext& ctx) {
      c10::ScalarType type = result_type(ctx, {0, 1});
      auto xs = promote_and_broadcast(ctx.b, {ctx.tensor(0), ctx.tensor(1)}, type);
      return std::vector<Value>{ctx.b.compare(xs[0], xs[1], direction)};
    };
    std::string n = name;
    register_lowering("aten::" + n + ".Tensor", lower,
                      {"aten::" + n + "_.Tensor", "aten::" + n + ".Tensor_out"});
    register_lowering("aten::" + n + ".Scalar", lower,
                      {"aten::" + n + "_.Scalar", "aten::" + n + ".Scalar_out"});
  }
  for (auto [name, hlo_op] : {std::pair{"logical_and", "and"}, std::pair{"logical_or", "or"},
                              std::pair{"logical_xor", "xor"}}) {
    std::string n = name;
    std::string o = hlo_op;
    register_lowering("aten::" + n, [o](LoweringContext& ctx) {
      Builder& b = ctx.b;
      auto truth = [&](Value x) {
        return b.compare(x, b.zeros(TensorType{b.element_type(x), b.dims(x)}), hlo::Compare::kNe);
      };
      auto shape = broadcast_shape(b.dims(ctx.tensor(0)), b.dims(ctx.tensor(1)));
      Value x = broadcast_to(b, truth(ctx.tensor(0)), shape);
      Value y = broadcast_to(b, truth(ctx.tensor(1)), shape);
      return std::vector<Value>{b.binary(o, x, y)};
    }, {"aten::" + n + "_", "aten::" + n + ".out"});
  }
}

void register_select_ops() {
  register_lowering("aten::where.self", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {1, 2});
    Value cond = ctx.tensor(0);
    TORCH_CHECK(ctx.dtype(0) == at::kBool || ctx.dtype(0) == at::kByte,
                "where expected condition to be a boolean tensor, but got a tensor with dtype ",
                ctx.dtype(0));
    cond = b.convert(cond, ElementType::kPred);
    auto shape = broadcast_shape(b.dims(cond), broadcast_shape(b.dims(ctx.tensor(1)),
                                                               b.dims(ctx.tensor(2))));
    Value x = broadcast_to(b, convert(b, ctx.tensor(1), type), shape);
    Value y = broadcast_to(b, convert(b, ctx.tensor(2), type), shape);
    return std::vector<Value>{b.select(broadcast_to(b, cond, shape), x, y)};
  }, {"aten::where.self_out"});

  auto clamp_lower = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    TORCH_CHECK(!ctx.is_none(1) || !ctx.is_none(2),
                "torch.clamp: At least one of 'min' or 'max' must not be None");
    c10::ScalarType type = result_type(ctx, {0, 1, 2});
    Value x = convert(b, ctx.tensor(0), type);
    std::vector<int64_t> shape = b.dims(x);
    for (size_t i : {1, 2}) {
      if (!ctx.is_none(i)) shape = broadcast_shape(shape, b.dims(ctx.tensor(i)));
    }
    x = broadcast_to(b, x, shape);
    if (!ctx.is_none(1)) {
      Value lo = broadcast_to(b, convert(b, ctx.tensor(1), type), shape);
      // NaN in x propagates; maximum does that.
      x = b.binary("maximum", x, lo);
    }
    if (!ctx.is_none(2)) {
      Value hi = broadcast_to(b, convert(b, ctx.tensor(2), type), shape);
      x = b.binary("minimum", x, hi);
    }
    return std::vector<Value>{x};
  };
  register_lowering("aten::clamp", clamp_lower, {"aten::clamp_", "aten::clamp.out"});
  register_lowering("aten::clamp.Tensor", clamp_lower, {"aten::clamp_.Tensor", "aten::clamp.Tensor_out"});
  for (auto [name, hlo_op] : {std::pair{"clamp_min", "maximum"}, std::pair{"clamp_max", "minimum"}}) {
    std::string n = name, o = hlo_op;
    auto lower = [o](LoweringContext& ctx) {
      c10::ScalarType type = result_type(ctx, {0, 1});
      auto xs = promote_and_broadcast(ctx.b, {ctx.tensor(0), ctx.tensor(1)}, type);
      return std::vector<Value>{ctx.b.binary(o, xs[0], xs[1])};
    };
    register_lowering("aten::" + n, lower, {"aten::" + n + "_", "aten::" + n + ".out"});
    register_lowering("aten::" + n + ".Tensor", lower,
                      {"aten::" + n + "_.Tensor", "aten::" + n + ".Tensor_out"});
  }

  auto masked_fill = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    TORCH_CHECK(ctx.dtype(1) == at::kBool, "masked_fill_ only supports boolean masks, but got mask "
                "with dtype ", ctx.dtype(1));
    // In place, the kernel refuses a result larger than self, as torch does.
    auto shape = broadcast_shape(b.dims(x), b.dims(ctx.tensor(1)));
    x = broadcast_to(b, x, shape);
    Value mask = broadcast_to(b, ctx.tensor(1), shape);
    Value fill = b.splat(ctx.scalar(2, b.element_type(x)), shape);
    return std::vector<Value>{b.select(mask, fill, x)};
  };
  register_lowering("aten::masked_fill.Scalar", masked_fill,
                    {"aten::masked_fill_.Scalar", "aten::masked_fill.Scalar_out"});
  register_lowering("aten::masked_fill.Tensor", masked_fill,
                    {"aten::masked_fill_.Tensor", "aten::masked_fill.Tensor_out"});
}

// self + value * t1 (*|/) t2 and lerp, the optimizers' update ops.
void register_ternary() {
  for (auto [name, hlo_op] : {std::pair{"addcmul", "multiply"}, std::pair{"addcdiv", "divide"}}) {
    std::string n = name, o = hlo_op;
    register_lowering("aten::" + n, [o, n](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = result_type(ctx, {0, 1, 2});
      TORCH_CHECK(n != "addcdiv" || c10::isFloatingType(type) || c10::isComplexType(type),
                  "Integer division with addcdiv is no longer supported, and in a future release "
                  "addcdiv will perform a true division of tensor1 and tensor2.");
      c10::ScalarType compute = opmath_type(type);
      auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)}, compute);
      Value value = b.splat(ctx.scalar(3, et(compute)), b.dims(xs[0]));
      Value r = b.binary("add", xs[0], b.binary("multiply", value, b.binary(o, xs[1], xs[2])));
      return std::vector<Value>{convert(b, r, type)};
    }, {"aten::" + n + "_", "aten::" + n + ".out"});
  }
  // torch's two-sided formula keeps lerp exact at weight 0 and 1.
  auto lerp = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)}, compute);
    Value start = xs[0], end = xs[1], w = xs[2];
    auto dims = b.dims(start);
    Value diff = b.binary("subtract", end, start);
    Value half = b.splat(b.constant(0.5, et(compute)), dims);
    Value one = b.splat(b.constant(1.0, et(compute)), dims);
    Value low = b.binary("add", start, b.binary("multiply", w, diff));
    Value high = b.binary("subtract", end, b.binary("multiply", diff, b.binary("subtract", one, w)));
    Value small = b.compare(b.unary("abs", w), half, hlo::Compare::kLt);
    return std::vector<Value>{convert(b, b.select(small, low, high), type)};
  };
  register_lowering("aten::lerp.Scalar", lerp, {"aten::lerp_.Scalar", "aten::lerp.Scalar_out"});
  register_lowering("aten::lerp.Tensor", lerp, {"aten::lerp_.Tensor", "aten::lerp.Tensor_out"});
}

LoweringRegistrar registrar([] {
  register_ternary();
  register_unary();
  register_binary();
  register_pow();
  register_shifts();
  register_comparisons();
  register_select_ops();
});

}  // namespace
}  // namespace torch_pjrt::ops
