// Segments along the middle dim of an [O, M, I] tensor, shared by
// embedding_bag (bags of looked-up rows) and segment_reduce: the segment of
// each position is computed on the device from the segments' starts (data,
// never read by the host); rows are combined per segment with a scatter and
// read back per position with a gather, or, below kSmall compared pairs,
// with a masked reduce over every (segment, position) pair, which XLA
// compiles several times faster. Ids outside the table are dropped
// (combining) or clamped (reading back): no access out of bounds.
#pragma once

#include <string>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {

Value s64_splat(Builder& b, int64_t value, const std::vector<int64_t>& dims);

// For values [O, S] (s64), how many of each row's values lie in [0, m], for
// each position m in [0, length): [O, length]. Small sizes compare every
// pair (cheap to compile); large ones scatter-add a mark per value and take
// a prefix sum (linear memory).
Value count_up_to(Builder& b, Value values, int64_t length);

// The segment of each position for segments starting at `starts` [O, S]:
// the number of starts at or before it, minus one (-1 before the first
// start; the last of equal starts wins). [O, length].
Value segment_of(Builder& b, Value starts, int64_t length);

// Combines updates [O, M, I] into table [O, T, I] at rows ids [O, M] (s64)
// with `op` ("add", "multiply", "maximum", "minimum", or "nan_maximum" and
// "nan_minimum", where NaN wins); positions whose id is outside [0, T) are
// left out.
Value segment_scatter(Builder& b, Value table, Value ids, Value updates, const std::string& op);

// table[o, ids[o, m], :] for each position: [O, M, I]. Ids are clamped into
// [0, T); a table without rows gives zeros.
Value segment_gather(Builder& b, Value table, Value ids);

// All elements of an i1 tensor (true for an empty one).
Value all_of(Builder& b, Value pred);

// lo <= x < hi (s64 x; hi a static bound).
Value index_in_range(Builder& b, Value x, int64_t lo, int64_t hi);

}  // namespace torch_pjrt::ops
