#include "ops/ordering.h"

#include <utility>
#include <vector>

namespace torch_pjrt::ops {

hlo::RegionFn nan_last_order(bool descending, bool is_float) {
  return [descending, is_float](Builder& r, const std::vector<Value>& a) {
    Value lhs = a[0], rhs = a[1];
    if (descending) std::swap(lhs, rhs);
    Value less = r.compare(lhs, rhs, hlo::Compare::kLt);
    if (is_float) {
      Value lhs_nan = r.compare(lhs, lhs, hlo::Compare::kNe);
      Value rhs_nan = r.compare(rhs, rhs, hlo::Compare::kNe);
      less = r.binary("or", r.binary("and", r.unary("not", lhs_nan), rhs_nan),
                      r.binary("and", less, r.unary("not", rhs_nan)));
    }
    return std::vector<Value>{less};
  };
}

Value scan(Builder& b, Value x, int64_t dim, const char* op, double identity) {
  auto dims = b.dims(x);
  int64_t n = dims[dim];
  ElementType t = b.element_type(x);
  int64_t rank = static_cast<int64_t>(dims.size());
  for (int64_t shift = 1; shift < n; shift *= 2) {
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    low[dim] = shift;
    std::vector<int64_t> start(rank, 0), limit = dims, strides(rank, 1);
    limit[dim] = n - shift;
    Value shifted = b.pad(b.slice(x, start, limit, strides), b.constant(identity, t), low, high, interior);
    x = b.binary(op, x, shifted);
  }
  return x;
}

}  // namespace torch_pjrt::ops
