// Shared by the pooling lowerings (pooling.cc, adaptive_pooling.cc): the
// window geometry of torch's 1-3-d pooling ops, the optional batch dim, the
// max-with-index selection, and the scatter of gradients to the flat
// indices max pooling returns.
#pragma once

#include <string>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops::pooling {

// One pooling op's windows over `nd` spatial dims (per dim: kernel, stride,
// padding, dilation, input and output size, and the padding past p that
// ceil_mode needs on the high side).
struct Geometry {
  int nd = 0;
  std::vector<int64_t> k, s, p, d, in, out, extra;
};

// Checks the input's rank (nd + 1 unbatched, nd + 2 batched) and that only
// the batch dim may be empty, with torch's messages (RuntimeError).
void check_input(const std::string& op, int nd, const std::vector<int64_t>& dims);

// The geometry of `op` on an input of `dims`; `kernel`, `stride`, `padding`
// and `dilation` hold 1 or nd values (stride empty: the kernel's).
Geometry geometry(const std::string& op, int nd, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                  bool ceil_mode);

// Adds a batch dim of 1 to an unbatched input ([C, spatial...]);
// drop_batch removes it again from a result when `rank` says it was added.
Value add_batch(Builder& b, Value x, int nd);
Value drop_batch(Builder& b, Value x, size_t rank, int nd);

// The reduce_window attributes of `g` on [N, C, spatial...].
Builder::WindowAttrs window(const Geometry& g);
Value sum_windows(Builder& b, Value x, const Builder::WindowAttrs& w);

// The region body of a (value, index) max over (best_v, best_i, cand_v,
// cand_i): the larger value wins, equal values keep the smaller index; NaN is
// above every number and among NaNs the larger index wins (the CPU kernels
// scan in index order and let every NaN replace the best so far).
std::vector<Value> max_with_index(Builder& r, const std::vector<Value>& a, bool is_float);

// Each element's index within its plane/volume: [N, C, spatial...] s64.
Value flat_index(Builder& b, const std::vector<int64_t>& dims, int nd);

// The gradient of a max pool: `g` ([N, C, out...]) added at the flat
// `indices` of planes shaped like `input_dims` ([N, C, in...]).
Value scatter_flat(Builder& b, Value g, Value indices, const std::vector<int64_t>& input_dims, int nd);

// True when `dims` has no elements.
bool empty(const std::vector<int64_t>& dims);

}  // namespace torch_pjrt::ops::pooling
