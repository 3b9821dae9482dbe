// The few builder helpers every lowering reuses: dtype conversion, torch's
// type promotion, broadcasting, dimension wrapping, reductions.
#pragma once

#include <c10/core/ScalarType.h>

#include <initializer_list>
#include <vector>

#include "ops/dtypes.h"
#include "ops/lowering.h"

namespace torch_pjrt::ops {

ElementType et(c10::ScalarType type);
Value convert(Builder& b, Value v, c10::ScalarType type);

// torch's result type for the listed arguments (tensors, 0-d tensors and
// wrapped Python numbers in their categories).
c10::ScalarType result_type(const LoweringContext& ctx, std::initializer_list<size_t> args);
// The dtype float-only math uses for `type`: integers and bool become the
// default float dtype.
c10::ScalarType float_type(c10::ScalarType type);

// The type arithmetic on `type` is carried out in, as torch's CPU kernels
// do: float32 for bfloat16 and float16, `type` otherwise.
c10::ScalarType opmath_type(c10::ScalarType type);

// Broadcast shape of two shapes, with torch's error for a mismatch.
std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
Value broadcast_to(Builder& b, Value v, const std::vector<int64_t>& dims);
// Converts each value to `type` and broadcasts all to their common shape.
std::vector<Value> promote_and_broadcast(Builder& b, const std::vector<Value>& values,
                                         c10::ScalarType type);

// Wraps a possibly negative dim; IndexError as torch raises it.
int64_t wrap_dim(int64_t dim, int64_t rank);
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank);

enum class ReduceKind { kSum, kProd, kMax, kMin, kAnd, kOr };
Value reduce(Builder& b, Value x, const std::vector<int64_t>& dims, ReduceKind kind);
// 0, 1, ..., rank - 1: every dim, to reduce a tensor to one value.
std::vector<int64_t> all_dims(int64_t rank);
// The identity element of `kind` for `type` (0, 1, -inf/lowest, +inf/max, ...).
Value reduce_init(Builder& b, ElementType type, ReduceKind kind);
// Broadcasts a reduction result back over the dims it reduced.
Value expand_reduced(Builder& b, Value reduced, const std::vector<int64_t>& input_dims,
                     const std::vector<int64_t>& reduced_dims);
// Re-inserts reduced dims as size 1 (keepdim=True).
Value keep_dims(Builder& b, Value reduced, const std::vector<int64_t>& input_dims,
                const std::vector<int64_t>& reduced_dims);

}  // namespace torch_pjrt::ops
