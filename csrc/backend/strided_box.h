// Reading and writing a strided view of a flat storage with slices instead
// of a gather or scatter over computed indices.
//
// Most non-contiguous views torch makes are boxes: sorted by stride, each
// dim's stride is a whole multiple of the next one's, and its elements do
// not overlap (`x[..., :16]`, `x[:, -1]`, `x.t()`, `x[::2]`, expanded dims).
// Such a view is a window of the flat storage, reshaped so that each view
// dim is a dim of its own, then sliced: XLA fuses that into a strided loop.
// The general gather costs a computed index per element, and on the XLA CPU
// plugin it does not vectorize. Overlapping views (`as_strided` windows)
// keep the gather.
#pragma once

#include <c10/util/ArrayRef.h>

#include <optional>
#include <vector>

#include "hlo/builder.h"

namespace torch_pjrt::backend {

struct StridedBox {
  // The view's dims that are neither size 1 nor stride 0, by stride, largest
  // first: their index in the view, size and stride.
  std::vector<int64_t> dims, sizes, strides;
  // Elements of the window read from the offset on, and how many of them
  // may lie past the storage's end (the window is padded by that many).
  int64_t window = 1, overhang = 0;
  // A dim of size > 1 and stride 0 (an expand): several view elements are
  // one storage element, so the view is read this way but not written.
  bool expanded = false;
};

// The box a view of `sizes`/`strides` is, or none where it overlaps itself.
std::optional<StridedBox> strided_box(c10::IntArrayRef sizes, c10::IntArrayRef strides);

// flat[offset + sum(i_k * stride_k)] for every index of `sizes` (torch's
// view semantics); `flat` is 1-d, `offset` an s64 scalar.
hlo::Value read_box(hlo::Builder& b, hlo::Value flat, hlo::Value offset, const StridedBox& box,
                    c10::IntArrayRef sizes);

// `flat` with the view's elements replaced by `values` (shaped like the
// view), the inverse of read_box; not for an `expanded` box.
hlo::Value write_box(hlo::Builder& b, hlo::Value flat, hlo::Value offset, const StridedBox& box,
                     hlo::Value values);

}  // namespace torch_pjrt::backend
