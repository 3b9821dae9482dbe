// Fixed-window pooling over 2 or 3 spatial dims: max_pool{2,3}d_with_indices,
// avg_pool{2,3}d and their backward ops, on [N, C, spatial...] or
// [C, spatial...] inputs (1-d pooling reaches these as 2-d). Adaptive
// pooling is in adaptive_pooling.cc, the shared window helpers in
// pooling_windows.h.
#include <c10/util/Exception.h>

#include <limits>
#include <string>

#include "ops/pooling_windows.h"

namespace torch_pjrt::ops {
namespace {

using pooling::Geometry;

// The output dims of a pooling op of geometry `g` on `dims` (batched or not).
std::vector<int64_t> out_dims(const std::vector<int64_t>& dims, const Geometry& g) {
  std::vector<int64_t> r(dims.begin(), dims.end() - g.nd);
  r.insert(r.end(), g.out.begin(), g.out.end());
  return r;
}

// avg_pool's divisor per output position, [out...].
Value avg_divisor(Builder& b, const Geometry& g, bool count_include_pad,
                  std::optional<int64_t> divisor_override, ElementType t) {
  if (divisor_override) {
    return b.splat(b.constant(static_cast<double>(*divisor_override), t), g.out);
  }
  std::vector<int64_t> plane = {1, 1};
  plane.insert(plane.end(), g.in.begin(), g.in.end());
  Value ones = b.splat(b.constant(1.0, t), plane);
  Builder::WindowAttrs w = pooling::window(g);
  if (count_include_pad) {
    // Padding counts, the part of a ceil_mode window past it does not.
    std::vector<int64_t> pad = {0, 0}, none(g.nd + 2, 0);
    pad.insert(pad.end(), g.p.begin(), g.p.end());
    ones = b.pad(ones, b.constant(1.0, t), pad, pad, none);
    for (int i = 0; i < g.nd; ++i) w.padding[2 + i] = {0, g.extra[i]};
  }
  return b.reshape(pooling::sum_windows(b, ones, w), g.out);
}

std::vector<int64_t> spatial_mapping(int nd) {
  std::vector<int64_t> m;
  for (int i = 0; i < nd; ++i) m.push_back(2 + i);
  return m;
}

void register_pooling(int nd) {
  std::string n = std::to_string(nd);
  std::string max_name = "aten::max_pool" + n + "d_with_indices";
  // max_pool{n}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
  register_lowering(max_name, [nd, max_name](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    auto dims0 = b.dims(x0);
    Geometry g = pooling::geometry(max_name, nd, dims0, ctx.int_list(1), ctx.int_list(2),
                                   ctx.int_list(3), ctx.int_list(4), ctx.bool_arg(5));
    ElementType t = b.element_type(x0);
    auto od = out_dims(dims0, g);
    if (pooling::empty(dims0)) {
      return std::vector<Value>{b.zeros(TensorType{t, od}), b.zeros(TensorType{ElementType::kS64, od})};
    }
    Value x = pooling::add_batch(b, x0, nd);
    Value flat = pooling::flat_index(b, b.dims(x), nd);
    bool is_float = hlo::is_float(t);
    auto out = b.reduce_window(
        {x, flat},
        {reduce_init(b, t, ReduceKind::kMax),
         b.constant_int(std::numeric_limits<int64_t>::max(), ElementType::kS64)},
        pooling::window(g), [is_float](Builder& r, const std::vector<Value>& a) {
          return pooling::max_with_index(r, a, is_float);
        });
    return std::vector<Value>{pooling::drop_batch(b, out[0], dims0.size(), nd),
                              pooling::drop_batch(b, out[1], dims0.size(), nd)};
  }, {max_name + ".out"});

  // max_pool{n}d_with_indices_backward(grad, self, kernel, stride, padding, dilation, ceil_mode, indices)
  register_lowering(max_name + "_backward", [nd](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    size_t rank = b.dims(self).size();
    auto dims = b.dims(pooling::add_batch(b, self, nd));
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value g = b.convert(pooling::add_batch(b, ctx.tensor(0), nd), acc);
    Value idx = pooling::add_batch(b, ctx.tensor(7), nd);
    Value r = pooling::scatter_flat(b, g, idx, dims, nd);
    return std::vector<Value>{pooling::drop_batch(b, b.convert(r, et(ctx.dtype(0))), rank, nd)};
  }, {max_name + "_backward.grad_input"});

  std::string avg_name = "aten::avg_pool" + n + "d";
  // avg_pool{n}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  register_lowering(avg_name, [nd, avg_name](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x0 = ctx.tensor(0);
    auto dims0 = b.dims(x0);
    Geometry g = pooling::geometry(avg_name, nd, dims0, ctx.int_list(1), ctx.int_list(2),
                                   ctx.int_list(3), {}, ctx.bool_arg(4));
    auto divisor_override = ctx.optional_int(6);
    TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
    if (pooling::empty(dims0)) return std::vector<Value>{b.zeros(TensorType{et(ctx.dtype(0)), out_dims(dims0, g)})};
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value x = b.convert(pooling::add_batch(b, x0, nd), acc);
    Value sums = pooling::sum_windows(b, x, pooling::window(g));
    Value divisor = avg_divisor(b, g, ctx.bool_arg(5), divisor_override, acc);
    Value r = b.binary("divide", sums, b.broadcast_in_dim(divisor, b.dims(sums), spatial_mapping(nd)));
    return std::vector<Value>{pooling::drop_batch(b, b.convert(r, et(ctx.dtype(0))), dims0.size(), nd)};
  }, {avg_name + ".out"});

  // avg_pool{n}d_backward(grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
  register_lowering(avg_name + "_backward", [nd, avg_name](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(1);
    auto dims0 = b.dims(self);
    Geometry g = pooling::geometry(avg_name, nd, dims0, ctx.int_list(2), ctx.int_list(3),
                                   ctx.int_list(4), {}, ctx.bool_arg(5));
    auto divisor_override = ctx.optional_int(7);
    TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
    if (pooling::empty(dims0)) return std::vector<Value>{b.zeros(TensorType{et(ctx.dtype(1)), dims0})};
    ElementType acc = et(opmath_type(ctx.dtype(1)));
    Value grad = b.convert(pooling::add_batch(b, ctx.tensor(0), nd), acc);
    auto gd = b.dims(grad);
    Value divisor = avg_divisor(b, g, ctx.bool_arg(6), divisor_override, acc);
    grad = b.binary("divide", grad, b.broadcast_in_dim(divisor, gd, spatial_mapping(nd)));
    // The transpose of a strided window sum: spread with interior zeros,
    // pad, then sum windows of the same size with stride 1.
    Builder::WindowAttrs w;
    w.dimensions = {1, 1};
    w.strides = std::vector<int64_t>(nd + 2, 1);
    w.dilations = std::vector<int64_t>(nd + 2, 1);
    w.padding = {{0, 0}, {0, 0}};
    std::vector<int64_t> interior = {0, 0}, none(nd + 2, 0);
    for (int i = 0; i < nd; ++i) {
      int64_t lo = g.k[i] - 1 - g.p[i];
      int64_t hi = g.in[i] - (gd[2 + i] - 1) * g.s[i] - 1 - lo + g.k[i] - 1;
      w.dimensions.push_back(g.k[i]);
      w.padding.push_back({lo, hi});
      interior.push_back(g.s[i] - 1);
    }
    Value spread = b.pad(grad, b.constant(0, acc), none, none, interior);
    Value r = pooling::sum_windows(b, spread, w);
    return std::vector<Value>{pooling::drop_batch(b, b.convert(r, et(ctx.dtype(1))), dims0.size(), nd)};
  }, {avg_name + "_backward.grad_input"});
}

LoweringRegistrar registrar([] {
  register_pooling(2);
  register_pooling(3);
});

}  // namespace
}  // namespace torch_pjrt::ops
