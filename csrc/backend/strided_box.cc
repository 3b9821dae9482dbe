#include "backend/strided_box.h"

#include <algorithm>
#include <numeric>

namespace torch_pjrt::backend {
namespace {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;
using pjrt::ElementType;

// The window reshaped so each box dim is a dim: [s0, st0/st1, ...,
// st(r-2)/st(r-1), st(r-1)]; its first element of the last dim is the
// view's element.
std::vector<int64_t> box_shape(const StridedBox& box) {
  size_t r = box.dims.size();
  std::vector<int64_t> shape{box.sizes[0]};
  for (size_t k = 1; k < r; ++k) shape.push_back(box.strides[k - 1] / box.strides[k]);
  shape.push_back(box.strides[r - 1]);
  return shape;
}

// The box's dims in the view's order, as positions in the box (stride order).
std::vector<int64_t> view_order(const StridedBox& box) {
  std::vector<int64_t> order(box.dims.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t c) { return box.dims[a] < box.dims[c]; });
  return order;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

Value padded(Builder& b, Value flat, const StridedBox& box) {
  if (box.overhang == 0) return flat;
  Value zero = b.zeros(TensorType{b.element_type(flat), {}});
  return b.pad(flat, zero, {0}, {box.overhang}, {0});
}

}  // namespace

std::optional<StridedBox> strided_box(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  StridedBox box;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 0) return std::nullopt;  // nothing to read; the caller has its path
    if (sizes[k] > 1 && strides[k] == 0) box.expanded = true;
    if (sizes[k] == 1 || strides[k] == 0) continue;
    if (strides[k] < 0) return std::nullopt;
    box.dims.push_back(static_cast<int64_t>(k));
  }
  std::stable_sort(box.dims.begin(), box.dims.end(),
                   [&](int64_t a, int64_t c) { return strides[a] > strides[c]; });
  for (int64_t d : box.dims) {
    box.sizes.push_back(sizes[d]);
    box.strides.push_back(strides[d]);
  }
  int64_t last = 1;  // offset of the view's last element, plus one
  for (size_t k = 0; k < box.dims.size(); ++k) {
    last += (box.sizes[k] - 1) * box.strides[k];
    if (k == 0) continue;
    // Each dim's rows must fit between two steps of the dim above, and
    // those steps must be whole numbers of the dim's own stride.
    if (box.strides[k - 1] % box.strides[k] != 0 ||
        box.strides[k - 1] / box.strides[k] < box.sizes[k]) {
      return std::nullopt;
    }
  }
  box.window = box.dims.empty() ? 1 : box.sizes[0] * box.strides[0];
  box.overhang = box.window - last;
  return box;
}

Value read_box(Builder& b, Value flat, Value offset, const StridedBox& box,
               c10::IntArrayRef sizes) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  Value window = b.dynamic_slice(padded(b, flat, box), {offset}, {box.window});
  if (box.dims.empty()) return b.broadcast_in_dim(b.reshape(window, {}), out, {});
  size_t r = box.dims.size();
  std::vector<int64_t> start(r + 1, 0), limit(box.sizes), step(r + 1, 1);
  limit.push_back(1);
  Value x = b.slice(b.reshape(window, box_shape(box)), start, limit, step);
  x = b.reshape(x, box.sizes);
  std::vector<int64_t> order = view_order(box);
  if (!is_identity(order)) x = b.transpose(x, order);
  std::vector<int64_t> mapping;
  for (int64_t k : order) mapping.push_back(box.dims[k]);
  return b.broadcast_in_dim(x, out, mapping);
}

Value write_box(Builder& b, Value flat, Value offset, const StridedBox& box, Value values) {
  int64_t n = b.dims(flat)[0];
  Value base = padded(b, flat, box);
  Value updated;
  if (box.dims.empty()) {
    updated = b.dynamic_update_slice(base, b.reshape(values, {1}), {offset});
  } else {
    size_t r = box.dims.size();
    std::vector<int64_t> order = view_order(box);
    std::vector<int64_t> in_view_order;
    for (int64_t k : order) in_view_order.push_back(box.sizes[k]);
    Value v = b.reshape(values, in_view_order);
    // To stride order: box dim k is the view-order dim where order == k.
    std::vector<int64_t> to_box(r);
    for (size_t i = 0; i < r; ++i) to_box[order[i]] = static_cast<int64_t>(i);
    if (!is_identity(to_box)) v = b.transpose(v, to_box);
    std::vector<int64_t> v_dims(box.sizes);
    v_dims.push_back(1);
    v = b.reshape(v, v_dims);
    Value window = b.reshape(b.dynamic_slice(base, {offset}, {box.window}), box_shape(box));
    Value zero = b.constant_int(0, ElementType::kS64);
    window = b.dynamic_update_slice(window, v, std::vector<Value>(r + 1, zero));
    updated = b.dynamic_update_slice(base, b.reshape(window, {box.window}), {offset});
  }
  return box.overhang == 0 ? updated : b.slice(updated, {0}, {n}, {1});
}

}  // namespace torch_pjrt::backend
