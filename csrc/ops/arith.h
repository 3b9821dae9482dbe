// Shorthand for elementwise formulas on values of one type and shape
// (`like`'s): constants and the arithmetic, comparison and select ops,
// for lowerings written as math (special functions, polynomials).
#pragma once

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {

struct Arith {
  Builder& b;
  Value like;  // any value of the elements' type and shape
  Value c(double v) const { return b.splat(b.constant(v, b.element_type(like)), b.dims(like)); }
  Value ci(int64_t v) const { return b.splat(b.constant_int(v, ElementType::kS64), b.dims(like)); }
  Value add(Value x, Value y) const { return b.binary("add", x, y); }
  Value sub(Value x, Value y) const { return b.binary("subtract", x, y); }
  Value mul(Value x, Value y) const { return b.binary("multiply", x, y); }
  Value div(Value x, Value y) const { return b.binary("divide", x, y); }
  Value neg(Value x) const { return b.unary("negate", x); }
  Value abs(Value x) const { return b.unary("abs", x); }
  Value sqrt(Value x) const { return b.unary("sqrt", x); }
  Value rsqrt(Value x) const { return b.unary("rsqrt", x); }
  Value log(Value x) const { return b.unary("log", x); }
  Value exp(Value x) const { return b.unary("exponential", x); }
  Value cos(Value x) const { return b.unary("cosine", x); }
  Value sin(Value x) const { return b.unary("sine", x); }
  Value acos(Value x) const { return b.unary("chlo.acos", x); }
  Value sel(Value p, Value t, Value f) const { return b.select(p, t, f); }
  Value cmp(Value x, Value y, hlo::Compare d) const { return b.compare(x, y, d); }
  Value lt(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kLt); }
  Value le(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kLe); }
  Value gt(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kGt); }
  Value eq(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kEq); }
  Value ne(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kNe); }
  Value both(Value x, Value y) const { return b.binary("and", x, y); }
  Value either(Value x, Value y) const { return b.binary("or", x, y); }
  Value is_nan(Value x) const { return b.compare(x, x, hlo::Compare::kNe); }
  Value is_inf(Value x) const { return eq(abs(x), c(INFINITY)); }
};

}  // namespace torch_pjrt::ops
