// The trapezoid-rule grid (trapezoid.h).
#include "ops/trapezoid.h"

#include <vector>

namespace torch_pjrt::ops {

namespace {
constexpr double kStep = 0.2;
constexpr int64_t kNodes = 33;
}  // namespace

TrapezoidGrid trapezoid_grid(Builder& b, Value x) {
  std::vector<int64_t> dims = b.dims(x);
  std::vector<int64_t> mapping = all_dims(static_cast<int64_t>(dims.size()));
  int64_t dim = static_cast<int64_t>(dims.size());
  dims.push_back(kNodes);
  Value xb = b.broadcast_in_dim(x, dims, mapping);
  Arith g{b, xb};
  Value j = b.iota(TensorType{b.element_type(x), dims}, dim);
  Value w = g.mul(j, g.c(kStep));
  Value w2 = g.mul(w, w);
  Value weight = g.mul(g.c(kStep), g.exp(g.neg(w2)));
  weight = g.sel(g.eq(j, g.c(0.0)), g.mul(weight, g.c(0.5)), weight);
  return {g, xb, w, w2, weight, dim};
}

Value node_sum(const TrapezoidGrid& grid, Value integrand) {
  return reduce(grid.o.b, grid.o.mul(grid.weight, integrand), {grid.dim}, ReduceKind::kSum);
}

}  // namespace torch_pjrt::ops
