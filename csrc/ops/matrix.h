// Helpers for lowerings over batches of matrices (the last two dims): the
// LU, Householder QR and Jacobi eigen/singular value lowerings share them.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {

// `lead` followed by `tail`: a batch shape plus matrix dims.
std::vector<int64_t> with(std::vector<int64_t> lead, std::initializer_list<int64_t> tail);
// The dims before the last `tail` ones.
std::vector<int64_t> batch_of(Builder& b, Value x, int64_t tail);
// Broadcasts x's leading dims to `batch`, keeping its last `tail` dims.
Value broadcast_batch(Builder& b, Value x, const std::vector<int64_t>& batch, int64_t tail);

// Sums x along `dim` where `mask` holds (at most one entry per line): exact.
Value pick(Builder& b, Value mask, Value x, int64_t dim);
// The diagonal of each matrix, batch + [n] (square matrices).
Value diagonal(Builder& b, Value x);
// s64 iota over x's dims along `dim` (row or column numbers).
Value index_of(Builder& b, const std::vector<int64_t>& dims, int64_t dim);

Value transpose_last(Builder& b, Value x);
// Complex conjugate; the identity for real types.
Value conj(Builder& b, Value x);
// x^H: the conjugate transpose of each matrix.
Value adjoint(Builder& b, Value x);
// x @ y over matching batch dims.
Value batched_matmul(Builder& b, Value x, Value y);
// Identity matrices of `type`, batch + [n, n].
Value eye(Builder& b, ElementType type, const std::vector<int64_t>& dims);
// |x| as x's real type (the modulus for complex).
Value modulus(Builder& b, Value x);
// The real type of x's element type (f32 for c64).
ElementType real_type(Builder& b, Value x);

// Runs `step(c, i, values)` for i = 0 .. count - 1 as one stablehlo.while
// over `carried`; the step sees only its arguments (carry what it reads).
using LoopStep = std::function<std::vector<Value>(Builder&, Value, const std::vector<Value>&)>;
std::vector<Value> for_range(Builder& b, int64_t count, std::vector<Value> carried, const LoopStep& step);

}  // namespace torch_pjrt::ops
