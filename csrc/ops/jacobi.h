// The Jacobi singular value decomposition for other lowerings (jacobi.cc).
#pragma once

#include "ops/householder.h"

namespace torch_pjrt::ops {

struct Svd {
  Value u, s, vh;  // u and vh invalid without compute_uv; s real, descending
};

// A = U diag(S) Vh for each matrix of the batch (any shape, real or complex).
Svd svd(Builder& b, Value a, bool full_matrices, bool compute_uv);

}  // namespace torch_pjrt::ops
