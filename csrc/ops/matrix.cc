// Batched-matrix helpers (matrix.h).
#include "ops/matrix.h"

#include <algorithm>

namespace torch_pjrt::ops {

std::vector<int64_t> with(std::vector<int64_t> lead, std::initializer_list<int64_t> tail) {
  lead.insert(lead.end(), tail);
  return lead;
}

std::vector<int64_t> batch_of(Builder& b, Value x, int64_t tail) {
  auto d = b.dims(x);
  return std::vector<int64_t>(d.begin(), d.end() - tail);
}

Value broadcast_batch(Builder& b, Value x, const std::vector<int64_t>& batch, int64_t tail) {
  auto d = b.dims(x);
  std::vector<int64_t> to = batch;
  to.insert(to.end(), d.end() - tail, d.end());
  return broadcast_to(b, x, to);
}

Value pick(Builder& b, Value mask, Value x, int64_t dim) {
  return reduce(b, b.select(mask, x, b.zeros(b.type(x))), {dim}, ReduceKind::kSum);
}

Value index_of(Builder& b, const std::vector<int64_t>& dims, int64_t dim) {
  return b.iota(TensorType{ElementType::kS64, dims}, dim);
}

Value diagonal(Builder& b, Value x) {
  auto d = b.dims(x);
  int64_t r = static_cast<int64_t>(d.size());
  Value on = b.compare(index_of(b, d, r - 2), index_of(b, d, r - 1), hlo::Compare::kEq);
  return pick(b, on, x, r - 1);
}

Value transpose_last(Builder& b, Value x) {
  int64_t r = b.type(x).rank();
  std::vector<int64_t> perm = all_dims(r);
  std::swap(perm[r - 1], perm[r - 2]);
  return b.transpose(x, perm);
}

Value conj(Builder& b, Value x) {
  if (!hlo::is_complex(b.element_type(x))) return x;
  return b.complex(b.real(x), b.unary("negate", b.imag(x)));
}

Value adjoint(Builder& b, Value x) { return conj(b, transpose_last(b, x)); }

Value batched_matmul(Builder& b, Value x, Value y) {
  int64_t r = b.type(x).rank();
  std::vector<int64_t> batch = all_dims(r - 2);
  return b.dot_general(x, y, batch, batch, {r - 1}, {r - 2}, b.element_type(x));
}

Value eye(Builder& b, ElementType type, const std::vector<int64_t>& dims) {
  int64_t r = static_cast<int64_t>(dims.size());
  return b.convert(b.compare(index_of(b, dims, r - 2), index_of(b, dims, r - 1), hlo::Compare::kEq),
                   type);
}

ElementType real_type(Builder& b, Value x) {
  ElementType t = b.element_type(x);
  if (t == ElementType::kC64) return ElementType::kF32;
  if (t == ElementType::kC128) return ElementType::kF64;
  return t;
}

Value modulus(Builder& b, Value x) {
  if (!hlo::is_complex(b.element_type(x))) return b.unary("abs", x);
  // hypot(re, im) as max * sqrt(1 + (min / max)^2): no overflow on the way.
  Value re = b.unary("abs", b.real(x)), im = b.unary("abs", b.imag(x));
  Value hi = b.binary("maximum", re, im), lo = b.binary("minimum", re, im);
  Value one = b.splat(b.constant(1.0, b.element_type(hi)), b.dims(hi));
  Value safe_hi = b.select(b.compare(hi, b.zeros(b.type(hi)), hlo::Compare::kEq), one, hi);
  Value ratio = b.binary("divide", lo, safe_hi);
  return b.binary("multiply", hi, b.unary("sqrt", b.binary("add", one, b.binary("multiply", ratio, ratio))));
}

// Loops i = 0 .. count - 1 over `carried`, each step `step(c, i, values)`.
std::vector<Value> for_range(Builder& b, int64_t count, std::vector<Value> carried,
                             const LoopStep& step) {
  if (count == 0) return carried;
  carried.insert(carried.begin(), b.constant_int(0, ElementType::kS64));
  auto out = b.while_loop(
      carried,
      [count](Builder& c, const std::vector<Value>& v) {
        return std::vector<Value>{c.compare(v[0], c.constant_int(count, ElementType::kS64), hlo::Compare::kLt)};
      },
      [&](Builder& c, const std::vector<Value>& v) {
        std::vector<Value> rest(v.begin() + 1, v.end());
        std::vector<Value> next = step(c, v[0], rest);
        next.insert(next.begin(), c.binary("add", v[0], c.constant_int(1, ElementType::kS64)));
        return next;
      });
  out.erase(out.begin());
  return out;
}

}  // namespace torch_pjrt::ops
