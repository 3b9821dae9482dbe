// interpolate: nearest and bilinear 2-D upsampling with their backward ops.
// Source positions are computed in the program from iota, in f32 as torch
// computes them; rows and columns are then gathered (forward) or scattered
// with add (backward) one dimension at a time.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

// torch's area_pixel_compute_scale: the scale from output to input.
float pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  if (scale && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

std::optional<double> optional_scale(LoweringContext& ctx, size_t i) {
  if (ctx.is_none(i)) return std::nullopt;
  return ctx.double_arg(i);
}

// Gathers index `idx` ([out] s64) along `dim` of x.
Value take(Builder& b, Value x, int64_t dim, Value idx) {
  auto dims = b.dims(x);
  int64_t n = b.dims(idx)[0];
  std::vector<int64_t> offset, slice = dims, out = dims;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d != dim) offset.push_back(d);
  }
  slice[dim] = 1;
  out[dim] = n;
  Builder::GatherDims g{offset, {dim}, {dim}, 1};
  return b.gather(x, b.reshape(idx, {n, 1}), g, slice, out);
}

// Adds slices of g ([.., out, ..] along dim) into rows idx of zeros [.., in, ..].
Value put_add(Builder& b, Value g, int64_t dim, Value idx, int64_t in) {
  auto dims = b.dims(g);
  auto target = dims;
  target[dim] = in;
  int64_t n = b.dims(idx)[0];
  std::vector<int64_t> window;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d != dim) window.push_back(d);
  }
  Builder::ScatterDims s{window, {dim}, {dim}, 1};
  return b.scatter(b.zeros(TensorType{b.element_type(g), target}), b.reshape(idx, {n, 1}), g, s,
                   [](Builder& r, const std::vector<Value>& a) {
                     return std::vector<Value>{r.binary("add", a[0], a[1])};
                   });
}

Value nearest_index(Builder& b, int64_t in, int64_t out, float scale) {
  Value dst = b.convert(b.iota(TensorType{ElementType::kS64, {out}}, 0), ElementType::kF32);
  Value src = b.unary("floor", b.binary("multiply", dst, b.splat(b.constant(scale, ElementType::kF32), {out})));
  Value idx = b.convert(src, ElementType::kS64);
  return b.binary("minimum", idx, b.splat(b.constant_int(in - 1, ElementType::kS64), {out}));
}

struct Linear1d {
  Value lo, hi;     // s64 [out]
  Value weight_hi;  // f32 [out]
};

Linear1d linear_index(Builder& b, int64_t in, int64_t out, float scale, bool align_corners) {
  Value dst = b.convert(b.iota(TensorType{ElementType::kS64, {out}}, 0), ElementType::kF32);
  Value s = b.splat(b.constant(scale, ElementType::kF32), {out});
  Value src;
  if (align_corners) {
    src = b.binary("multiply", dst, s);
  } else {
    Value half = b.splat(b.constant(0.5, ElementType::kF32), {out});
    src = b.binary("subtract", b.binary("multiply", b.binary("add", dst, half), s), half);
    src = b.binary("maximum", src, b.zeros(TensorType{ElementType::kF32, {out}}));
  }
  Value lo_f = b.unary("floor", src);
  Value lo = b.binary("minimum", b.convert(lo_f, ElementType::kS64),
                      b.splat(b.constant_int(in - 1, ElementType::kS64), {out}));
  Value hi = b.binary("minimum", b.binary("add", lo, b.splat(b.constant_int(1, ElementType::kS64), {out})),
                      b.splat(b.constant_int(in - 1, ElementType::kS64), {out}));
  return {lo, hi, b.binary("subtract", src, b.convert(lo, ElementType::kF32))};
}

Value weight_along(Builder& b, Value w, const std::vector<int64_t>& dims, int64_t dim) {
  return b.broadcast_in_dim(w, dims, {dim});
}

LoweringRegistrar registrar([] {
  // upsample_nearest{1,2,3}d(self, output_size, scales...) and backward
  // (grad, output_size, input_size, scales...).
  for (int64_t spatial : {1, 2, 3}) {
    std::string name = "aten::upsample_nearest" + std::to_string(spatial) + "d";
    std::vector<int> fwd_static, bwd_static;
    for (int64_t i = 0; i < spatial; ++i) {
      fwd_static.push_back(static_cast<int>(2 + i));
      bwd_static.push_back(static_cast<int>(3 + i));
    }
    register_lowering(name, [spatial](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto dims = b.dims(x);
      auto size = ctx.int_list(1);
      for (int64_t i = 0; i < spatial; ++i) {
        int64_t dim = 2 + i;
        float scale = pixel_scale(dims[dim], size[i], false, optional_scale(ctx, 2 + i));
        x = take(b, x, dim, nearest_index(b, dims[dim], size[i], scale));
      }
      return std::vector<Value>{x};
    }, {name + ".out"}, fwd_static);
    register_lowering(name + "_backward", [spatial](LoweringContext& ctx) {
      Builder& b = ctx.b;
      ElementType acc = et(opmath_type(ctx.dtype(0)));
      Value g = b.convert(ctx.tensor(0), acc);
      auto out = ctx.int_list(1), in = ctx.int_list(2);
      for (int64_t i = spatial - 1; i >= 0; --i) {
        int64_t dim = 2 + i;
        float scale = pixel_scale(in[dim], out[i], false, optional_scale(ctx, 3 + i));
        g = put_add(b, g, dim, nearest_index(b, in[dim], out[i], scale), in[dim]);
      }
      return std::vector<Value>{b.convert(g, et(ctx.dtype(0)))};
    }, {name + "_backward.grad_input"}, bwd_static);
  }

  // upsample_bilinear2d(self, output_size, align_corners, scales_h, scales_w)
  register_lowering("aten::upsample_bilinear2d", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(0), acc);
    auto size = ctx.int_list(1);
    bool align = ctx.bool_arg(2);
    for (int i = 0; i < 2; ++i) {
      int64_t dim = 2 + i;
      int64_t in = b.dims(x)[dim];
      Linear1d l = linear_index(b, in, size[i], pixel_scale(in, size[i], align, optional_scale(ctx, 3 + i)), align);
      Value lo = take(b, x, dim, l.lo), hi = take(b, x, dim, l.hi);
      Value w = weight_along(b, b.convert(l.weight_hi, acc), b.dims(lo), dim);
      x = b.binary("add", lo, b.binary("multiply", w, b.binary("subtract", hi, lo)));
    }
    return std::vector<Value>{b.convert(x, et(type))};
  }, {"aten::upsample_bilinear2d.out"}, {3, 4});
  // upsample_bilinear2d_backward(grad, output_size, input_size, align_corners, scales_h, scales_w)
  register_lowering("aten::upsample_bilinear2d_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value g = b.convert(ctx.tensor(0), acc);
    auto out = ctx.int_list(1), in = ctx.int_list(2);
    bool align = ctx.bool_arg(3);
    for (int i = 1; i >= 0; --i) {
      int64_t dim = 2 + i;
      Linear1d l = linear_index(b, in[dim], out[i], pixel_scale(in[dim], out[i], align, optional_scale(ctx, 4 + i)), align);
      Value w = weight_along(b, b.convert(l.weight_hi, acc), b.dims(g), dim);
      Value one = b.splat(b.constant(1.0, acc), b.dims(g));
      Value to_lo = b.binary("multiply", g, b.binary("subtract", one, w));
      Value to_hi = b.binary("multiply", g, w);
      g = b.binary("add", put_add(b, to_lo, dim, l.lo, in[dim]), put_add(b, to_hi, dim, l.hi, in[dim]));
    }
    return std::vector<Value>{b.convert(g, et(type))};
  }, {"aten::upsample_bilinear2d_backward.grad_input"}, {4, 5});
});

}  // namespace
}  // namespace torch_pjrt::ops
