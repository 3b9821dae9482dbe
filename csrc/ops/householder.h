// Householder QR pieces other lowerings build on (householder.cc).
#pragma once

#include "ops/matrix.h"

namespace torch_pjrt::ops {

struct Packed {
  Value a;    // R on and above the diagonal, reflectors below (LAPACK's geqrf)
  Value tau;  // batch + [min(m, n)]
};

Packed geqrf(Builder& b, Value a);
// Applies Q = H_0 H_1 ... H_{k-1} (reflectors packed in v: batch + [m, >= k],
// tau: batch + [k]) to c: Q C, Q^H C (left) or C Q, C Q^H (right).
Value apply_q(Builder& b, Value v, Value tau, Value c, bool left, bool adjoint);
// The leading `rows` x `cols` block of each matrix.
Value block(Builder& b, Value x, int64_t rows, int64_t cols);

}  // namespace torch_pjrt::ops
