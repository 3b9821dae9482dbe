// Draws from the lowering's generator state that several random ops share.
#pragma once

#include <vector>

#include "ops/lowering.h"

namespace torch_pjrt::ops {

// Uniform floats in [0, 1) of `type`, made from the top mantissa bits.
Value uniform01(LoweringContext& ctx, const std::vector<int64_t>& dims, ElementType type);
// Standard normal floats of `type` (f32 or f64): Box-Muller on two uniform
// draws.
Value standard_normal(LoweringContext& ctx, const std::vector<int64_t>& dims, ElementType type);
// The running sum of x [..., K] along its last dim (inclusive, or exclusive
// of each term itself): a product with a triangular matrix of ones.
Value running_sum_last(Builder& b, Value x, bool inclusive);
// Inversion sampling: for each row of pmf [..., K] (the probabilities of 0 ..
// K - 1), one uniform draw u and the count of terms whose cumulative
// probability is below u, in pmf's type.
Value count_below_uniform(LoweringContext& ctx, Value pmf);

}  // namespace torch_pjrt::ops
