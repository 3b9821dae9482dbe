// The trapezoid rule for integrals of the form int_{-inf}^{inf} e^{-w^2}
// f(x, w) dw with f even in w, as the Bessel and Airy lowerings write their
// large-argument forms: nodes w_j = 0.2 j on [0, 6.4] (e^{-w^2} < e^{-41}
// past it) along a new last dim of x, weights 0.2 e^{-w_j^2} (half at
// w = 0), and one reduction over that dim.
#pragma once

#include "ops/arith.h"

namespace torch_pjrt::ops {

struct TrapezoidGrid {
  Arith o;       // on the [dims..., nodes] shape
  Value x;       // x broadcast along the node dim
  Value w, w2;   // the nodes and their squares
  Value weight;
  int64_t dim;   // the node dim
};

TrapezoidGrid trapezoid_grid(Builder& b, Value x);
// sum_j weight_j * integrand_j: back to x's shape.
Value node_sum(const TrapezoidGrid& grid, Value integrand);

}  // namespace torch_pjrt::ops
