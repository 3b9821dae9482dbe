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

}  // namespace torch_pjrt::ops
