// Reflection and replication padding (1-D and 2-D) with their backward
// ops, built from slices, reverses and concatenations along each padded
// dimension; the backward folds the border gradients back in.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value slice_dim(Builder& b, Value x, int64_t dim, int64_t start, int64_t end) {
  auto dims = b.dims(x);
  std::vector<int64_t> lo(dims.size(), 0), hi = dims, st(dims.size(), 1);
  lo[dim] = start;
  hi[dim] = end;
  return b.slice(x, lo, hi, st);
}

// Pads `dim` by (left, right) with reflected or replicated borders; a
// negative amount crops instead, as torch allows.
Value pad_dim(Builder& b, Value x, int64_t dim, int64_t left, int64_t right, bool reflect) {
  int64_t n = b.dims(x)[dim];
  if (left < 0 || right < 0) {
    int64_t start = std::max<int64_t>(0, -left), end = n - std::max<int64_t>(0, -right);
    if (!reflect && end <= start) {
      // Every output position clamps to one edge: the last element when the
      // left crop passes the end, else the first.
      int64_t out = n + left + right;
      TORCH_CHECK(out >= 0, "input tensor is too small for the padding (", left, ", ", right,
                  ") at dimension ", dim, " of input ", c10::IntArrayRef(b.dims(x)));
      int64_t at = left < 0 ? n - 1 : 0;
      Value e = slice_dim(b, x, dim, at, at + 1);
      auto dims = b.dims(e);
      dims[dim] = out;
      return b.broadcast_in_dim(e, dims, all_dims(static_cast<int64_t>(dims.size())));
    }
    TORCH_CHECK(end > start, "padding crops dimension ", dim, " to nothing");
    return pad_dim(b, slice_dim(b, x, dim, start, end), dim, std::max<int64_t>(0, left),
                   std::max<int64_t>(0, right), reflect);
  }
  std::vector<Value> parts;
  if (reflect) {
    TORCH_CHECK(left < n && right < n, "Argument #4: Padding size should be less than the "
                "corresponding input dimension, but got: padding (", left, ", ", right,
                ") at dimension ", dim, " of input ", c10::IntArrayRef(b.dims(x)));
    if (left > 0) parts.push_back(b.reverse(slice_dim(b, x, dim, 1, left + 1), {dim}));
    parts.push_back(x);
    if (right > 0) parts.push_back(b.reverse(slice_dim(b, x, dim, n - 1 - right, n - 1), {dim}));
  } else {
    auto edge = [&](int64_t at, int64_t count) {
      Value e = slice_dim(b, x, dim, at, at + 1);
      auto dims = b.dims(e);
      dims[dim] = count;
      std::vector<int64_t> mapping;
      for (size_t i = 0; i < dims.size(); ++i) mapping.push_back(static_cast<int64_t>(i));
      return b.broadcast_in_dim(e, dims, mapping);
    };
    if (left > 0) parts.push_back(edge(0, left));
    parts.push_back(x);
    if (right > 0) parts.push_back(edge(n - 1, right));
  }
  return b.concatenate(parts, dim);
}

// The gradient of pad_dim: the middle, plus the borders folded back.
Value unpad_dim(Builder& b, Value g, int64_t dim, int64_t left, int64_t right, int64_t n,
                bool reflect) {
  if (left < 0 || right < 0) {
    // Cropped positions get no gradient: fold back the kept part, pad zeros.
    int64_t crop_lo = std::max<int64_t>(0, -left), crop_hi = std::max<int64_t>(0, -right);
    if (!reflect && crop_lo + crop_hi >= n) {
      // Everything came from one edge element (pad_dim): it gets the sum.
      auto dims = b.dims(g);
      dims[dim] = 1;
      Value sum = b.reshape(reduce(b, g, {dim}, ReduceKind::kSum), dims);
      std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0), interior(dims.size(), 0);
      int64_t at = left < 0 ? n - 1 : 0;
      low[dim] = at;
      high[dim] = n - 1 - at;
      return b.pad(sum, b.constant(0, b.element_type(sum)), low, high, interior);
    }
    Value inner = unpad_dim(b, g, dim, std::max<int64_t>(0, left), std::max<int64_t>(0, right),
                            n - crop_lo - crop_hi, reflect);
    auto dims = b.dims(inner);
    std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0), interior(dims.size(), 0);
    low[dim] = crop_lo;
    high[dim] = crop_hi;
    return b.pad(inner, b.constant(0, b.element_type(inner)), low, high, interior);
  }
  Value mid = slice_dim(b, g, dim, left, left + n);
  auto add_at = [&](Value block, int64_t start) {
    auto dims = b.dims(mid);
    std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0), interior(dims.size(), 0);
    low[dim] = start;
    high[dim] = dims[dim] - start - b.dims(block)[dim];
    mid = b.binary("add", mid, b.pad(block, b.constant(0, b.element_type(block)), low, high, interior));
  };
  if (reflect) {
    if (left > 0) add_at(b.reverse(slice_dim(b, g, dim, 0, left), {dim}), 1);
    if (right > 0) add_at(b.reverse(slice_dim(b, g, dim, left + n, left + n + right), {dim}), n - 1 - right);
  } else {
    auto one_wide = [&]() {
      auto d = b.dims(mid);
      d[dim] = 1;
      return d;
    };
    if (left > 0) {
      Value s = reduce(b, slice_dim(b, g, dim, 0, left), {dim}, ReduceKind::kSum);
      add_at(b.reshape(s, one_wide()), 0);
    }
    if (right > 0) {
      Value s = reduce(b, slice_dim(b, g, dim, left + n, left + n + right), {dim}, ReduceKind::kSum);
      add_at(b.reshape(s, one_wide()), n - 1);
    }
  }
  return mid;
}

void register_pad(const std::string& name, int64_t spatial, bool reflect) {
  register_lowering("aten::" + name, [spatial, reflect](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto pad = ctx.int_list(1);
    TORCH_CHECK(static_cast<int64_t>(pad.size()) == 2 * spatial, "padding size is expected to be ", 2 * spatial);
    int64_t rank = b.type(x).rank();
    // padding lists the last dim first: (left, right, top, bottom).
    for (int64_t i = 0; i < spatial; ++i) {
      x = pad_dim(b, x, rank - 1 - i, pad[2 * i], pad[2 * i + 1], reflect);
    }
    return std::vector<Value>{x};
  }, {"aten::" + name + ".out"});
  register_lowering("aten::" + name + "_backward", [spatial, reflect](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value g = ctx.tensor(0);
    auto in = b.dims(ctx.tensor(1));
    auto pad = ctx.int_list(2);
    int64_t rank = static_cast<int64_t>(in.size());
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    g = b.convert(g, acc);
    for (int64_t i = spatial - 1; i >= 0; --i) {
      int64_t dim = rank - 1 - i;
      g = unpad_dim(b, g, dim, pad[2 * i], pad[2 * i + 1], in[dim], reflect);
    }
    return std::vector<Value>{b.convert(g, et(ctx.dtype(0)))};
  }, {"aten::" + name + "_backward.grad_input"});
}

LoweringRegistrar registrar([] {
  register_pad("reflection_pad1d", 1, true);
  register_pad("reflection_pad2d", 2, true);
  register_pad("replication_pad1d", 1, false);
  register_pad("replication_pad2d", 2, false);
  register_pad("reflection_pad3d", 3, true);
  register_pad("replication_pad3d", 3, false);
});

}  // namespace
}  // namespace torch_pjrt::ops
