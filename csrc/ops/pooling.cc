// Pooling: max_pool2d (with indices), avg_pool2d, adaptive_avg_pool2d and
// their backward ops, on [N, C, H, W] or [C, H, W] inputs.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

struct Pool2d {
  int64_t k[2], s[2], p[2], d[2];
  int64_t in[2], out[2];
  int64_t extra[2];  // padding past p on the high side (ceil_mode)
};

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t span = d * (k - 1) + 1;
  int64_t numerator = in + 2 * p - span;
  int64_t out = (ceil_mode ? (numerator + s - 1) / s : numerator / s) + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

std::vector<int64_t> pair(const std::vector<int64_t>& v, std::vector<int64_t> fallback) {
  if (v.empty()) return fallback;
  if (v.size() == 1) return {v[0], v[0]};
  return v;
}

Pool2d pool_params(const std::vector<int64_t>& dims, const std::vector<int64_t>& kernel,
                   const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                   const std::vector<int64_t>& dilation, bool ceil_mode) {
  TORCH_CHECK(dims.size() == 3 || dims.size() == 4, "pool2d: expected 3D or 4D input, got ",
              dims.size(), "D");
  auto k = pair(kernel, {1, 1});
  auto s = pair(stride, k);
  auto p = pair(padding, {0, 0});
  auto d = pair(dilation, {1, 1});
  Pool2d r;
  for (int i = 0; i < 2; ++i) {
    TORCH_CHECK(p[i] <= k[i] / 2, "pad should be at most half of effective kernel size, but got pad=",
                p[i], ", kernel_size=", k[i]);
    r.k[i] = k[i], r.s[i] = s[i], r.p[i] = p[i], r.d[i] = d[i];
    r.in[i] = dims[dims.size() - 2 + i];
    r.out[i] = pool_out(r.in[i], k[i], s[i], p[i], d[i], ceil_mode);
    TORCH_CHECK(r.out[i] > 0, "Given input size too small for the pooling window");
    int64_t needed = (r.out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1;
    r.extra[i] = std::max<int64_t>(0, needed - r.in[i] - 2 * p[i]);
  }
  return r;
}

// Adds a batch dim to [C, H, W] inputs; `restore` removes it again.
Value batched(Builder& b, Value x) {
  auto dims = b.dims(x);
  if (dims.size() == 4) return x;
  return b.reshape(x, {1, dims[0], dims[1], dims[2]});
}

Value restore(Builder& b, Value x, size_t rank) {
  if (rank == 4) return x;
  auto dims = b.dims(x);
  return b.reshape(x, {dims[1], dims[2], dims[3]});
}

Builder::WindowAttrs window(const Pool2d& p) {
  Builder::WindowAttrs w;
  w.dimensions = {1, 1, p.k[0], p.k[1]};
  w.strides = {1, 1, p.s[0], p.s[1]};
  w.dilations = {1, 1, p.d[0], p.d[1]};
  w.padding = {{0, 0}, {0, 0}, {p.p[0], p.p[0] + p.extra[0]}, {p.p[1], p.p[1] + p.extra[1]}};
  return w;
}

Value sum_windows(Builder& b, Value x, const Builder::WindowAttrs& w) {
  return b.reduce_window({x}, {b.constant(0, b.element_type(x))}, w,
                         [](Builder& r, const std::vector<Value>& a) {
                           return std::vector<Value>{r.binary("add", a[0], a[1])};
                         })[0];
}

// avg_pool2d's divisor per output position, [oh, ow].
Value avg_divisor(Builder& b, const Pool2d& p, bool count_include_pad,
                  std::optional<int64_t> divisor_override, ElementType t) {
  TensorType plane{t, {1, 1, p.in[0], p.in[1]}};
  if (divisor_override) {
    return b.splat(b.constant(static_cast<double>(*divisor_override), t), {p.out[0], p.out[1]});
  }
  Value ones = b.splat(b.constant(1.0, t), plane.dims);
  Builder::WindowAttrs w = window(p);
  if (count_include_pad) {
    // Padding counts, the part of a ceil_mode window past it does not.
    ones = b.pad(ones, b.constant(1.0, t), {0, 0, p.p[0], p.p[1]}, {0, 0, p.p[0], p.p[1]}, {0, 0, 0, 0});
    w.padding = {{0, 0}, {0, 0}, {0, p.extra[0]}, {0, p.extra[1]}};
  }
  return b.reshape(sum_windows(b, ones, w), {p.out[0], p.out[1]});
}

LoweringRegistrar registrar([] {
  // max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
  register_lowering("aten::max_pool2d_with_indices", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    size_t rank = b.dims(x0).size();
    Pool2d p = pool_params(b.dims(x0), ctx.int_list(1), ctx.int_list(2), ctx.int_list(3),
                           ctx.int_list(4), ctx.bool_arg(5));
    Value x = batched(b, x0);
    auto dims = b.dims(x);
    ElementType t = b.element_type(x);
    TensorType idx_type{ElementType::kS64, dims};
    Value flat = b.binary("add", b.binary("multiply", b.iota(idx_type, 2),
                                          b.splat(b.constant_int(dims[3], ElementType::kS64), dims)),
                          b.iota(idx_type, 3));
    bool is_float = hlo::is_float(t);
    auto out = b.reduce_window(
        {x, flat}, {reduce_init(b, t, ReduceKind::kMax), b.constant_int(-1, ElementType::kS64)},
        window(p), [is_float](Builder& r, const std::vector<Value>& a) {
          Value better = r.compare(a[2], a[0], hlo::Compare::kGt);
          Value same = r.compare(a[2], a[0], hlo::Compare::kEq);
          if (is_float) {
            Value cand_nan = r.compare(a[2], a[2], hlo::Compare::kNe);
            Value best_nan = r.compare(a[0], a[0], hlo::Compare::kNe);
            better = r.binary("or", r.binary("and", cand_nan, r.unary("not", best_nan)),
                              r.binary("and", better, r.unary("not", best_nan)));
            same = r.binary("or", same, r.binary("and", cand_nan, best_nan));
          }
          // Ties keep the first index; padding (index -1) never wins a tie.
          Value earlier = r.binary("or", r.compare(a[1], r.constant_int(0, ElementType::kS64), hlo::Compare::kLt),
                                   r.binary("and", r.compare(a[3], r.constant_int(0, ElementType::kS64), hlo::Compare::kGe),
                                            r.compare(a[3], a[1], hlo::Compare::kLt)));
          Value take = r.binary("or", better, r.binary("and", same, earlier));
          return std::vector<Value>{r.select(take, a[2], a[0]), r.select(take, a[3], a[1])};
        });
    return std::vector<Value>{restore(b, out[0], rank), restore(b, out[1], rank)};
  }, {"aten::max_pool2d_with_indices.out"});

  // max_pool2d_with_indices_backward(grad, self, kernel, stride, padding, dilation, ceil_mode, indices)
  register_lowering("aten::max_pool2d_with_indices_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    size_t rank = b.dims(self).size();
    auto dims = b.dims(batched(b, self));
    Value g = batched(b, ctx.tensor(0));
    Value idx = batched(b, ctx.tensor(7));
    auto gd = b.dims(g);
    int64_t plane = dims[2] * dims[3], cells = gd[2] * gd[3];
    ElementType t = b.element_type(g);
    std::vector<int64_t> cell_dims = {gd[0], gd[1], cells};
    TensorType coord{ElementType::kS64, cell_dims};
    auto col = [&](Value v) { return b.reshape(v, {gd[0], gd[1], cells, 1}); };
    Value coords = b.concatenate({col(b.iota(coord, 0)), col(b.iota(coord, 1)), col(b.reshape(idx, cell_dims))}, 3);
    Builder::ScatterDims s{{}, {0, 1, 2}, {0, 1, 2}, 3};
    Value out = b.scatter(b.zeros(TensorType{t, {dims[0], dims[1], plane}}), coords,
                          b.reshape(g, cell_dims), s, [](Builder& r, const std::vector<Value>& a) {
                            return std::vector<Value>{r.binary("add", a[0], a[1])};
                          });
    return std::vector<Value>{restore(b, b.reshape(out, dims), rank)};
  }, {"aten::max_pool2d_with_indices_backward.grad_input"});

  // avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  register_lowering("aten::avg_pool2d", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    size_t rank = b.dims(x0).size();
    Pool2d p = pool_params(b.dims(x0), ctx.int_list(1), ctx.int_list(2), ctx.int_list(3), {},
                           ctx.bool_arg(4));
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value x = b.convert(batched(b, x0), acc);
    Value sums = sum_windows(b, x, window(p));
    Value divisor = avg_divisor(b, p, ctx.bool_arg(5), ctx.optional_int(6), acc);
    Value r = b.binary("divide", sums, b.broadcast_in_dim(divisor, b.dims(sums), {2, 3}));
    return std::vector<Value>{restore(b, b.convert(r, et(ctx.dtype(0))), rank)};
  }, {"aten::avg_pool2d.out"});

  // avg_pool2d_backward(grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
  register_lowering("aten::avg_pool2d_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    size_t rank = b.dims(self).size();
    Pool2d p = pool_params(b.dims(self), ctx.int_list(2), ctx.int_list(3), ctx.int_list(4), {},
                           ctx.bool_arg(5));
    ElementType acc = et(opmath_type(ctx.dtype(1)));
    Value g = b.convert(batched(b, ctx.tensor(0)), acc);
    auto gd = b.dims(g);
    Value divisor = avg_divisor(b, p, ctx.bool_arg(6), ctx.optional_int(7), acc);
    g = b.binary("divide", g, b.broadcast_in_dim(divisor, gd, {2, 3}));
    // The transpose of a strided window sum: spread with interior zeros,
    // pad, then sum windows of the same size with stride 1.
    std::vector<int64_t> low = {0, 0}, high = {0, 0}, interior = {0, 0};
    Builder::WindowAttrs w;
    w.dimensions = {1, 1, p.k[0], p.k[1]};
    w.strides = {1, 1, 1, 1};
    w.dilations = {1, 1, 1, 1};
    w.padding = {{0, 0}, {0, 0}};
    for (int i = 0; i < 2; ++i) {
      int64_t lo = p.k[i] - 1 - p.p[i];
      int64_t hi = p.in[i] - (gd[2 + i] - 1) * p.s[i] - 1 - lo + p.k[i] - 1;
      w.padding.push_back({lo, hi});
      interior.push_back(p.s[i] - 1);
    }
    Value spread = b.pad(g, b.constant(0, acc), {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, interior[2], interior[3]});
    Value r = sum_windows(b, spread, w);
    return std::vector<Value>{restore(b, b.convert(r, et(ctx.dtype(1))), rank)};
  }, {"aten::avg_pool2d_backward.grad_input"});

  // _adaptive_avg_pool2d(self, output_size): cell (i, j) averages rows
  // [floor(i*H/oh), ceil((i+1)*H/oh)) and the same for columns.
  register_lowering("aten::_adaptive_avg_pool2d", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    size_t rank = b.dims(x0).size();
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value x = b.convert(batched(b, x0), acc);
    auto dims = b.dims(x);
    auto size = ctx.int_list(1);
    int64_t oh = size[0], ow = size.size() > 1 ? size[1] : size[0];
    std::vector<Value> rows;
    for (int64_t i = 0; i < oh; ++i) {
      int64_t hs = i * dims[2] / oh, he = ((i + 1) * dims[2] + oh - 1) / oh;
      std::vector<Value> cells;
      for (int64_t j = 0; j < ow; ++j) {
        int64_t ws = j * dims[3] / ow, we = ((j + 1) * dims[3] + ow - 1) / ow;
        Value region = b.slice(x, {0, 0, hs, ws}, {dims[0], dims[1], he, we}, {1, 1, 1, 1});
        Value s = reduce(b, region, {2, 3}, ReduceKind::kSum);
        s = b.binary("divide", s, b.splat(b.constant(static_cast<double>((he - hs) * (we - ws)), acc), b.dims(s)));
        cells.push_back(b.reshape(s, {dims[0], dims[1], 1, 1}));
      }
      rows.push_back(b.concatenate(cells, 3));
    }
    return std::vector<Value>{restore(b, b.convert(b.concatenate(rows, 2), et(ctx.dtype(0))), rank)};
  }, {"aten::_adaptive_avg_pool2d.out"});

  register_lowering("aten::_adaptive_avg_pool2d_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    size_t rank = b.dims(self).size();
    ElementType acc = et(opmath_type(ctx.dtype(1)));
    auto dims = b.dims(batched(b, self));
    Value g = b.convert(batched(b, ctx.tensor(0)), acc);
    auto gd = b.dims(g);
    int64_t oh = gd[2], ow = gd[3];
    Value out = b.zeros(TensorType{acc, dims});
    for (int64_t i = 0; i < oh; ++i) {
      int64_t hs = i * dims[2] / oh, he = ((i + 1) * dims[2] + oh - 1) / oh;
      for (int64_t j = 0; j < ow; ++j) {
        int64_t ws = j * dims[3] / ow, we = ((j + 1) * dims[3] + ow - 1) / ow;
        Value cell = b.slice(g, {0, 0, i, j}, {gd[0], gd[1], i + 1, j + 1}, {1, 1, 1, 1});
        cell = b.binary("divide", cell, b.splat(b.constant(static_cast<double>((he - hs) * (we - ws)), acc), b.dims(cell)));
        Value block = b.broadcast_in_dim(b.reshape(cell, {gd[0], gd[1]}), {dims[0], dims[1], he - hs, we - ws}, {0, 1});
        out = b.binary("add", out, b.pad(block, b.constant(0, acc), {0, 0, hs, ws},
                                         {0, 0, dims[2] - he, dims[3] - we}, {0, 0, 0, 0}));
      }
    }
    return std::vector<Value>{restore(b, b.convert(out, et(ctx.dtype(1))), rank)};
  }, {"aten::_adaptive_avg_pool2d_backward.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
