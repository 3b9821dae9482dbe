// How the host transport reduces with gloo: the c10d op gloo runs for each
// reduction (an average or a pre-multiplied sum is a sum, then host work),
// and the host work itself.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "hlo/collective_programs.h"

namespace torch_pjrt::distributed {

inline c10d::ReduceOp gloo_op(hlo::Reduction r) {
  switch (r) {
    case hlo::Reduction::kProduct: return c10d::ReduceOp::PRODUCT;
    case hlo::Reduction::kMin: return c10d::ReduceOp::MIN;
    case hlo::Reduction::kMax: return c10d::ReduceOp::MAX;
    case hlo::Reduction::kBitAnd: return c10d::ReduceOp::BAND;
    case hlo::Reduction::kBitOr: return c10d::ReduceOp::BOR;
    case hlo::Reduction::kBitXor: return c10d::ReduceOp::BXOR;
    default: return c10d::ReduceOp::SUM;  // sum, and avg / premul_sum built on it
  }
}

// Before the sum: PREMUL_SUM scales each rank's values.
inline void premultiply(at::Tensor t, hlo::Reduction r, double factor) {
  if (r == hlo::Reduction::kPremulSum) t.mul_(factor);
}

// After the sum: AVG divides; integers truncate toward zero, as the device does.
inline void average(at::Tensor t, hlo::Reduction r, int size) {
  if (r != hlo::Reduction::kAvg) return;
  if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    t.div_(size, "trunc");
  } else {
    t.div_(size);
  }
}

}  // namespace torch_pjrt::distributed
