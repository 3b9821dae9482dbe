// torch.special's classical orthogonal polynomials of a tensor degree n:
// Chebyshev T, U, V, W (and shifted to [0, 1]), Hermite H and He, Laguerre L
// and Legendre P. Like torch's CPU kernels, each element takes the first of
// its family's cases that applies (n < 0, points with exact values, a closed
// form for large n inside [-1, 1]) or else runs the three-term recurrence up
// to its own degree. The recurrence is one stablehlo.while over the largest
// count any element needs; an element stops updating at its own count.
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

// What one element's evaluation sees: x in the compute type T, its degree
// as an integer (s64) and as T.
struct Point {
  Value x, n, nf;
};

struct Family {
  std::string name;  // "chebyshev_polynomial_t": aten::special_<name>
  // Cases tried in order before the recurrence: (applies?, value).
  std::function<std::vector<std::pair<Value, Value>>(Builder&, const Point&)> cases;
  // The recurrence's first two values (degree 0 and 1), p and q.
  std::function<std::pair<Value, Value>(Builder&, const Point&)> seed;
  // The next value from (k, x, p, q); k is the step's index in T, j + 1.
  std::function<Value(Builder&, Value k, Value x, Value p, Value q)> step;
};

struct Ops {
  Builder& b;
  Value like;  // any T-typed value of the elements' shape
  Value c(double v) const { return b.splat(b.constant(v, b.element_type(like)), b.dims(like)); }
  Value ci(int64_t v) const {
    return b.splat(b.constant_int(v, ElementType::kS64), b.dims(like));
  }
  Value add(Value x, Value y) const { return b.binary("add", x, y); }
  Value sub(Value x, Value y) const { return b.binary("subtract", x, y); }
  Value mul(Value x, Value y) const { return b.binary("multiply", x, y); }
  Value div(Value x, Value y) const { return b.binary("divide", x, y); }
  Value eq(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kEq); }
  Value ne(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kNe); }
  Value lt(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kLt); }
  Value gt(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kGt); }
  Value both(Value x, Value y) const { return b.binary("and", x, y); }
  Value either(Value x, Value y) const { return b.binary("or", x, y); }
  Value sel(Value p, Value t, Value f) const { return b.select(p, t, f); }
  Value abs(Value x) const { return b.unary("abs", x); }
  Value cos(Value x) const { return b.unary("cosine", x); }
  Value sin(Value x) const { return b.unary("sine", x); }
  Value acos(Value x) const { return b.unary("chlo.acos", x); }
  Value even(Value n) const {
    return eq(b.binary("remainder", n, ci(2)), ci(0));
  }
  // An integer expression of n (n + 1, 2n + 1), as torch converts it to T.
  Value as_t(Value n_int) const { return b.convert(n_int, b.element_type(like)); }
};

using Cases = std::vector<std::pair<Value, Value>>;

// n < 0 gives 0 in every family.
Cases negative(const Ops& o, const Point& pt) { return {{o.lt(pt.n, o.ci(0)), o.c(0)}}; }

// n == 0 and n == 1.
void low_degrees(const Ops& o, const Point& pt, Value one_value, Cases& cases) {
  cases.push_back({o.eq(pt.n, o.ci(0)), o.c(1)});
  cases.push_back({o.eq(pt.n, o.ci(1)), one_value});
}

// Chebyshev's 2y q - p, for all four kinds and their shifted forms.
Value chebyshev_step(Builder& b, Value, Value y, Value p, Value q) {
  Ops o{b, y};
  return o.sub(o.mul(o.add(y, y), q), p);
}

// The four Chebyshev kinds, on [-1, 1] (shifted=false, y = x) or on
// [0, 1] (y = 2x - 1). kind: 0 T, 1 U, 2 V, 3 W.
Family chebyshev(int kind, bool shifted) {
  static const char* letters = "tuvw";
  Family f;
  f.name = std::string(shifted ? "shifted_" : "") + "chebyshev_polynomial_" + letters[kind];
  auto y_of = [shifted](const Ops& o, Value x) { return shifted ? o.sub(o.add(x, x), o.c(1)) : x; };
  f.seed = [kind, y_of](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    Value y = y_of(o, pt.x);
    Value q = kind == 0 ? y : kind == 1 ? o.add(y, y)
            : kind == 2 ? o.sub(o.add(y, y), o.c(1)) : o.add(o.add(y, y), o.c(1));
    return std::make_pair(o.c(1), q);
  };
  f.step = [y_of](Builder& b, Value k, Value x, Value p, Value q) {
    Ops o{b, x};
    return chebyshev_step(b, k, y_of(o, x), p, q);
  };
  f.cases = [kind, shifted, y_of, f](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    Value x = pt.x, n = pt.n, nf = pt.nf;
    Value y = y_of(o, x);
    Value sign_one = o.sel(o.even(n), o.c(1), o.c(-1));
    Value n1 = o.as_t(b.binary("add", n, o.ci(1)));
    Value n21 = o.as_t(b.binary("add", b.binary("add", n, n), o.ci(1)));
    Value signed_n1 = o.sel(o.even(n), n1, b.unary("negate", n1));
    Value signed_n21 = o.sel(o.even(n), n21, b.unary("negate", n21));
    Cases cases = negative(o, pt);
    // Exact values at the interval's ends.
    if (!shifted) {
      Value end = o.eq(o.abs(x), o.c(1));
      Value pos = o.gt(x, o.c(0));
      Value v = kind == 0 ? o.sel(o.either(pos, o.even(n)), o.c(1), o.c(-1))
              : kind == 1 ? o.sel(o.either(pos, o.even(n)), n1, b.unary("negate", n1))
              : kind == 2 ? o.sel(pos, o.c(1), signed_n21)
                          : o.sel(pos, n21, sign_one);
      cases.push_back({end, v});
    } else {
      Value v1 = kind == 0 ? o.c(1) : kind == 1 ? n1 : kind == 2 ? o.c(1) : n21;
      Value v0 = kind == 0 ? sign_one : kind == 1 ? signed_n1 : kind == 2 ? signed_n21 : sign_one;
      cases.push_back({o.eq(x, o.c(1)), v1});
      cases.push_back({o.eq(x, o.c(0)), v0});
    }
    // Closed forms in theta = acos(y) for large degrees inside (-1, 1).
    int64_t from = shifted ? (kind == 3 ? 4 : 6) : (kind == 0 ? 6 : 8);
    Value inside = o.both(o.gt(n, o.ci(from)), o.lt(o.abs(y), o.c(1)));
    Value theta = o.acos(y);
    Value half = o.div(theta, o.c(2));
    Value nh = o.add(nf, o.c(0.5));
    Value closed;
    if (kind == 0) {
      closed = o.cos(o.mul(nf, theta));
    } else if (kind == 1) {
      Value s = o.sin(theta);
      closed = o.sel(o.ne(s, o.c(0)), o.div(o.sin(o.mul(n1, theta)), s),
                     o.div(o.mul(n1, o.cos(o.mul(n1, theta))), y));
    } else if (kind == 2) {
      closed = o.sel(o.ne(o.sin(half), o.c(1)), o.div(o.cos(o.mul(nh, theta)), o.cos(half)),
                     signed_n21);
    } else {
      Value at_end = shifted ? sign_one : o.sel(o.gt(x, o.c(0)), n21, sign_one);
      closed = o.sel(o.ne(o.cos(half), o.c(1)), o.div(o.sin(o.mul(nh, theta)), o.sin(half)),
                     at_end);
    }
    cases.push_back({inside, closed});
    low_degrees(o, pt, f.seed(b, pt).second, cases);
    return cases;
  };
  return f;
}

// Hermite's polynomials have no value past a degree limit (NaN), as torch's.
int64_t hermite_limit(ElementType t) { return t == ElementType::kF64 ? 512 : 128; }

Family hermite(bool physicists) {
  Family f;
  f.name = physicists ? "hermite_polynomial_h" : "hermite_polynomial_he";
  f.seed = [physicists](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    return std::make_pair(o.c(1), physicists ? o.add(pt.x, pt.x) : pt.x);
  };
  // H: k runs 2, 4, ...: (2x) q - 2(j+1) p. He: x q - (j+1) p.
  f.step = [physicists](Builder& b, Value k, Value x, Value p, Value q) {
    Ops o{b, x};
    if (physicists) return o.sub(o.mul(o.add(x, x), q), o.mul(o.add(k, k), p));
    return o.sub(o.mul(x, q), o.mul(k, p));
  };
  f.cases = [f](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    Cases cases = negative(o, pt);
    low_degrees(o, pt, f.seed(b, pt).second, cases);
    cases.push_back({o.gt(pt.n, o.ci(hermite_limit(b.element_type(pt.x)))), o.c(NAN)});
    return cases;
  };
  return f;
}

Family laguerre() {
  Family f;
  f.name = "laguerre_polynomial_l";
  f.seed = [](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    return std::make_pair(o.c(1), o.sub(o.c(1), pt.x));
  };
  // ((2k + (1 - x)) q - k p) / (k + 1)
  f.step = [](Builder& b, Value k, Value x, Value p, Value q) {
    Ops o{b, x};
    Value a = o.add(o.add(k, k), o.sub(o.c(1), x));
    return o.div(o.sub(o.mul(a, q), o.mul(k, p)), o.add(k, o.c(1)));
  };
  f.cases = [f](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    Cases cases = negative(o, pt);
    cases.push_back({o.eq(o.abs(pt.x), o.c(0)), o.c(1)});
    low_degrees(o, pt, f.seed(b, pt).second, cases);
    return cases;
  };
  return f;
}

Family legendre() {
  Family f;
  f.name = "legendre_polynomial_p";
  f.seed = [](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    return std::make_pair(o.c(1), pt.x);
  };
  // ((2k + 1) x q - k p) / (k + 1)
  f.step = [](Builder& b, Value k, Value x, Value p, Value q) {
    Ops o{b, x};
    Value a = o.mul(o.add(o.add(k, k), o.c(1)), x);
    return o.div(o.sub(o.mul(a, q), o.mul(k, p)), o.add(k, o.c(1)));
  };
  f.cases = [f](Builder& b, const Point& pt) {
    Ops o{b, pt.x};
    Cases cases = negative(o, pt);
    Value v = o.sel(o.either(o.gt(pt.x, o.c(0)), o.even(pt.n)), o.c(1), o.c(-1));
    cases.push_back({o.eq(o.abs(pt.x), o.c(1)), v});
    low_degrees(o, pt, f.seed(b, pt).second, cases);
    return cases;
  };
  return f;
}

// Runs the recurrence for the elements no case took: `count` (s64) steps
// each, from (p, q); returns q.
Value recurrence(Builder& b, const Family& f, Value x, Value p, Value q, Value count) {
  Value zero = b.constant_int(0, ElementType::kS64);
  Value most = reduce(b, count, all_dims(b.type(count).rank()), ReduceKind::kMax);
  most = b.binary("maximum", most, zero);
  std::vector<Value> out = b.while_loop(
      {zero, most, count, x, p, q},
      [](Builder& r, const std::vector<Value>& v) {
        return std::vector<Value>{r.compare(v[0], v[1], hlo::Compare::kLt)};
      },
      [&f](Builder& r, const std::vector<Value>& v) {
        Value j = v[0], count = v[2], x = v[3], p = v[4], q = v[5];
        const auto& dims = r.dims(x);
        Value active = r.compare(r.splat(j, dims), count, hlo::Compare::kLt);
        Value k = r.splat(r.convert(r.binary("add", j, r.constant_int(1, ElementType::kS64)),
                                    r.element_type(x)),
                          dims);
        Value next = f.step(r, k, x, p, q);
        Value j1 = r.binary("add", j, r.constant_int(1, ElementType::kS64));
        return std::vector<Value>{j1, v[1], count, x, r.select(active, q, p),
                                  r.select(active, next, q)};
      });
  return out[5];
}

void register_family(const Family& f) {
  std::string op = "special_" + f.name;
  register_lowering("aten::" + op, [f, op](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = float_type(result_type(ctx, {0, 1}));
    TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble, "\"", f.name,
                                "_cpu\" not implemented for '", c10::toString(type), "'");
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    Value x = xs[0], n_t = xs[1];
    Ops o{b, x};
    // torch casts the degree to int64; Hermite H maps NaN and infinities to -1.
    Value n = b.convert(n_t, ElementType::kS64);
    if (f.name == "hermite_polynomial_h") {
      Value finite = o.lt(o.abs(n_t), o.c(INFINITY));
      n = b.select(finite, n, o.ci(-1));
    }
    Point pt{x, n, o.as_t(n)};
    Cases cases = f.cases(b, pt);
    auto [p, q] = f.seed(b, pt);
    // Elements a case takes need no steps; the others need n - 1.
    Value taken = b.compare(n, o.ci(2), hlo::Compare::kLt);
    for (const auto& c : cases) taken = o.either(taken, c.first);
    Value count = o.sel(taken, o.ci(0), b.binary("subtract", n, o.ci(1)));
    Value result = recurrence(b, f, x, p, q, count);
    for (auto it = cases.rbegin(); it != cases.rend(); ++it) result = o.sel(it->first, it->second, result);
    return std::vector<Value>{convert(b, result, type)};
  }, {"aten::" + op + ".out"});
}

LoweringRegistrar registrar([] {
  for (int kind = 0; kind < 4; ++kind) {
    register_family(chebyshev(kind, false));
    register_family(chebyshev(kind, true));
  }
  register_family(hermite(true));
  register_family(hermite(false));
  register_family(laguerre());
  register_family(legendre());
});

}  // namespace
}  // namespace torch_pjrt::ops
