// Orders and scans shared by the lowerings that sort (sort, topk) and those
// that read order statistics (kthvalue, median, mode).
#pragma once

#include "ops/helpers.h"

namespace torch_pjrt::ops {

// Sort order with NaN after every number (torch's order); `descending`
// swaps the operands. Returns the comparator region for Builder::sort.
hlo::RegionFn nan_last_order(bool descending, bool is_float);

// Inclusive scan of `x` along `dim` with the binary StableHLO op `op`,
// `identity` filling in before the start, in log2(n) shifted steps
// (Hillis-Steele): static shapes, no loops.
Value scan(Builder& b, Value x, int64_t dim, const char* op, double identity);

}  // namespace torch_pjrt::ops
