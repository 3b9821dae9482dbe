// Pairwise p-norm distances: cdist between two sets of row vectors and
// pdist within one (its upper triangle, row by row), and their backward
// ops. p is a compile-time value (0, 1, 2 and infinity take their own
// forms), the differences are taken directly rather than through a matmul.
#include <c10/util/Exception.h>

#include <cmath>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

// Distances between the rows of a [..., P, M] and b [..., R, M] (same
// batch): [..., P, R].
Value distances(Builder& b, Value x1, Value x2, double p) {
  auto d1 = b.dims(x1), d2 = b.dims(x2);
  int64_t r = static_cast<int64_t>(d1.size());
  int64_t P = d1[r - 2], R = d2[r - 2], M = d1[r - 1];
  std::vector<int64_t> batch(d1.begin(), d1.end() - 2);
  std::vector<int64_t> full = batch;
  full.insert(full.end(), {P, R, M});
  std::vector<int64_t> m1, m2;
  for (int64_t i = 0; i < r - 2; ++i) {
    m1.push_back(i);
    m2.push_back(i);
  }
  m1.insert(m1.end(), {r - 2, r});
  m2.insert(m2.end(), {r - 1, r});
  Value diff = b.binary("subtract", b.broadcast_in_dim(x1, full, m1), b.broadcast_in_dim(x2, full, m2));
  Value a = b.unary("abs", diff);
  ElementType t = b.element_type(a);
  if (M == 0) {
    std::vector<int64_t> out = batch;
    out.insert(out.end(), {P, R});
    return b.zeros(TensorType{t, out});
  }
  if (p == 0) {
    return reduce(b, b.convert(b.compare(a, b.zeros(b.type(a)), hlo::Compare::kNe), t), {r}, ReduceKind::kSum);
  }
  if (p == 1) return reduce(b, a, {r}, ReduceKind::kSum);
  if (std::isinf(p)) return reduce(b, a, {r}, ReduceKind::kMax);
  if (p == 2) return b.unary("sqrt", reduce(b, b.binary("multiply", a, a), {r}, ReduceKind::kSum));
  Value powered = b.binary("power", a, b.splat(b.constant(p, t), full));
  Value s = reduce(b, powered, {r}, ReduceKind::kSum);
  return b.binary("power", s, b.splat(b.constant(1.0 / p, t), b.dims(s)));
}

// The gradient with respect to x1 [..., P, M] of sum(g * dist) for
// dist = distances(x1, x2) [..., P, R]: sum over R of g times the
// derivative of each distance in its difference (0 where a distance is 0).
Value distances_grad(Builder& b, Value g, Value x1, Value x2, Value dist, double p) {
  auto d1 = b.dims(x1), d2 = b.dims(x2);
  int64_t r = static_cast<int64_t>(d1.size());
  int64_t P = d1[r - 2], R = d2[r - 2], M = d1[r - 1];
  std::vector<int64_t> full(d1.begin(), d1.end() - 2);
  full.insert(full.end(), {P, R, M});
  std::vector<int64_t> m1 = all_dims(r - 2), m2 = all_dims(r - 2), md = all_dims(r);
  m1.insert(m1.end(), {r - 2, r});
  m2.insert(m2.end(), {r - 1, r});
  Value diff = b.binary("subtract", b.broadcast_in_dim(x1, full, m1), b.broadcast_in_dim(x2, full, m2));
  ElementType t = b.element_type(diff);
  auto c = [&](double v) { return b.splat(b.constant(v, t), full); };
  Value gd = b.broadcast_in_dim(g, full, md), dd = b.broadcast_in_dim(dist, full, md);
  Value zero = c(0.0);
  Value a = b.unary("abs", diff), sign = b.unary("sign", diff);
  Value at_zero = b.compare(dd, zero, hlo::Compare::kEq);
  Value safe = b.select(at_zero, c(1.0), dd);
  Value term;
  if (p == 0 || M == 0) {
    term = zero;
  } else if (p == 1) {
    term = b.binary("multiply", sign, gd);
  } else if (std::isinf(p)) {
    term = b.select(b.compare(a, dd, hlo::Compare::kEq), b.binary("multiply", sign, gd), zero);
  } else if (p == 2) {
    term = b.select(at_zero, zero, b.binary("divide", b.binary("multiply", diff, gd), safe));
  } else {
    // sign(d) |d|^(p-1) / dist^(p-1); below p = 1 a zero difference gives 0.
    Value num = b.binary("multiply", sign, b.binary("power", a, c(p - 1)));
    term = b.binary("divide", b.binary("multiply", num, gd), b.binary("power", safe, c(p - 1)));
    Value drop = at_zero;
    if (p < 1) drop = b.binary("or", drop, b.compare(a, zero, hlo::Compare::kEq));
    term = b.select(drop, zero, term);
  }
  return reduce(b, term, {r - 1}, ReduceKind::kSum);
}

// The condensed pdist vector (pairs i < j in row order) as a symmetric
// [n, n] matrix with a zero diagonal.
Value symmetric_from_condensed(Builder& b, Value v, int64_t n) {
  std::vector<Value> rows;
  int64_t start = 0;
  ElementType t = b.element_type(v);
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = n - 1 - i;
    Value row = len > 0 ? b.slice(v, {start}, {start + len}, {1}) : b.zeros(TensorType{t, {0}});
    rows.push_back(b.reshape(b.pad(row, b.constant(0, t), {i + 1}, {0}, {0}), {1, n}));
    start += len;
  }
  Value upper = b.concatenate(rows, 0);
  return b.binary("add", upper, b.transpose(upper, {1, 0}));
}

void check_float(c10::ScalarType type, const char* op, const char* which) {
  TORCH_CHECK(c10::isFloatingType(type), op, " only supports floating-point dtypes, ", which, " got: ",
              type);
}

LoweringRegistrar registrar([] {
  // _cdist_forward(x1, x2, p, compute_mode)
  register_lowering("aten::_cdist_forward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_float(ctx.dtype(0), "cdist", "X1");
    check_float(ctx.dtype(1), "cdist", "X2");
    Value x1 = ctx.tensor(0), x2 = ctx.tensor(1);
    auto d1 = b.dims(x1), d2 = b.dims(x2);
    TORCH_CHECK(d1.size() >= 2, "cdist only supports at least 2D tensors, X1 got: ", d1.size(), "D");
    TORCH_CHECK(d2.size() >= 2, "cdist only supports at least 2D tensors, X2 got: ", d2.size(), "D");
    TORCH_CHECK(d1.back() == d2.back(), "X1 and X2 must have the same number of columns. X1: ",
                d1.back(), " X2: ", d2.back());
    double p = ctx.double_arg(2);
    TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
    auto batch = broadcast_shape(std::vector<int64_t>(d1.begin(), d1.end() - 2),
                                 std::vector<int64_t>(d2.begin(), d2.end() - 2));
    auto to = [&](std::vector<int64_t> d) {
      std::vector<int64_t> out = batch;
      out.insert(out.end(), d.end() - 2, d.end());
      return out;
    };
    c10::ScalarType type = c10::promoteTypes(ctx.dtype(0), ctx.dtype(1));
    Value a = convert(b, broadcast_to(b, x1, to(d1)), opmath_type(type));
    Value c = convert(b, broadcast_to(b, x2, to(d2)), opmath_type(type));
    return std::vector<Value>{convert(b, distances(b, a, c, p), type)};
  }, {}, /*static_scalars=*/{2});

  // _pdist_forward(self, p): distances of rows i < j, in row order.
  register_lowering("aten::_pdist_forward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_float(ctx.dtype(0), "pdist", "input");
    Value x = ctx.tensor(0);
    auto d = b.dims(x);
    TORCH_CHECK(d.size() == 2, "pdist only supports 2D tensors, got: ", d.size(), "D");
    double p = ctx.double_arg(1);
    TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
    c10::ScalarType type = ctx.dtype(0);
    int64_t n = d[0];
    Value xa = convert(b, x, opmath_type(type));
    if (n < 2) return std::vector<Value>{b.zeros(TensorType{et(type), {0}})};
    Value all = distances(b, xa, xa, p);  // [n, n]
    std::vector<Value> rows;
    for (int64_t i = 0; i + 1 < n; ++i) {
      rows.push_back(b.reshape(b.slice(all, {i, i + 1}, {i + 1, n}, {1, 1}), {n - 1 - i}));
    }
    return std::vector<Value>{convert(b, b.concatenate(rows, 0), type)};
  }, {}, /*static_scalars=*/{1});

  // _cdist_backward(grad, x1, x2, p, cdist): the gradient for x1 (autograd
  // calls it again with the arguments swapped for x2's).
  register_lowering("aten::_cdist_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    Value g = b.convert(ctx.tensor(0), acc), dist = b.convert(ctx.tensor(4), acc);
    Value x1 = b.convert(ctx.tensor(1), acc), x2 = b.convert(ctx.tensor(2), acc);
    auto gd = b.dims(g);
    auto batch = std::vector<int64_t>(gd.begin(), gd.end() - 2);
    auto to = [&](Value x) {
      auto d = b.dims(x);
      std::vector<int64_t> out = batch;
      out.insert(out.end(), d.end() - 2, d.end());
      return broadcast_to(b, x, out);
    };
    Value grad = distances_grad(b, g, to(x1), to(x2), dist, ctx.double_arg(3));
    // x1 may have broadcast over batch dims: sum those back.
    auto want = b.dims(x1);
    auto have = b.dims(grad);
    std::vector<int64_t> summed;
    size_t lead = have.size() - want.size();
    for (size_t i = 0; i < have.size(); ++i) {
      if (i < lead || (want[i - lead] == 1 && have[i] != 1)) summed.push_back(static_cast<int64_t>(i));
    }
    if (!summed.empty()) grad = b.reshape(reduce(b, grad, summed, ReduceKind::kSum), want);
    return std::vector<Value>{b.convert(grad, et(type))};
  }, {}, /*static_scalars=*/{3});

  // _pdist_backward(grad, self, p, pdist)
  register_lowering("aten::_pdist_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(1), acc);
    int64_t n = b.dims(x)[0];
    if (n < 2) return std::vector<Value>{b.zeros(TensorType{et(type), b.dims(x)})};
    Value g = symmetric_from_condensed(b, b.convert(ctx.tensor(0), acc), n);
    Value dist = symmetric_from_condensed(b, b.convert(ctx.tensor(3), acc), n);
    return std::vector<Value>{b.convert(distances_grad(b, g, x, x, dist, ctx.double_arg(2)), et(type))};
  }, {}, /*static_scalars=*/{2});
});

}  // namespace
}  // namespace torch_pjrt::ops
