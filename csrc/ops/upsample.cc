// interpolate: nearest and nearest-exact (1-3 D), linear, bilinear and
// trilinear, bicubic, and antialiased bilinear and bicubic resizing with their backward
// ops. Source
// positions are computed in the program from iota, in f32 as torch computes
// them; each spatial dim is then gathered (forward) or scattered with add
// (backward) in turn, as the interpolations are separable.
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

// nearest: floor(dst * scale); nearest-exact: floor((dst + 0.5) * scale).
Value nearest_index(Builder& b, int64_t in, int64_t out, float scale, bool exact) {
  Value dst = b.convert(b.iota(TensorType{ElementType::kS64, {out}}, 0), ElementType::kF32);
  if (exact) dst = b.binary("add", dst, b.splat(b.constant(0.5, ElementType::kF32), {out}));
  Value src = b.unary("floor", b.binary("multiply", dst, b.splat(b.constant(scale, ElementType::kF32), {out})));
  Value idx = b.convert(src, ElementType::kS64);
  return b.binary("minimum", idx, b.splat(b.constant_int(in - 1, ElementType::kS64), {out}));
}

struct Linear1d {
  Value lo, hi;     // s64 [out]
  Value weight_hi;  // f32 [out]
};

// torch's area_pixel_compute_source_index: the source coordinate of each
// output position (clamped at 0 except for cubic).
Value source_index(Builder& b, int64_t out, float scale, bool align_corners, bool cubic) {
  Value dst = b.convert(b.iota(TensorType{ElementType::kS64, {out}}, 0), ElementType::kF32);
  Value s = b.splat(b.constant(scale, ElementType::kF32), {out});
  if (align_corners) return b.binary("multiply", dst, s);
  Value half = b.splat(b.constant(0.5, ElementType::kF32), {out});
  Value src = b.binary("subtract", b.binary("multiply", b.binary("add", dst, half), s), half);
  return cubic ? src : b.binary("maximum", src, b.zeros(TensorType{ElementType::kF32, {out}}));
}

Linear1d linear_index(Builder& b, int64_t in, int64_t out, float scale, bool align_corners) {
  Value src = source_index(b, out, scale, align_corners, false);
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

// Bicubic taps of one dim: source rows floor(src) - 1 .. + 2 (clamped into
// the input) and Keys' cubic convolution weights (A = -0.75), f32 [out].
struct Cubic1d {
  Value index[4];
  Value weight[4];
};

Cubic1d cubic_index(Builder& b, int64_t in, int64_t out, float scale, bool align_corners) {
  Value src = source_index(b, out, scale, align_corners, true);
  Value fl = b.unary("floor", src);
  Value t = b.binary("subtract", src, fl);
  auto c = [&](double v) { return b.splat(b.constant(v, ElementType::kF32), {out}); };
  const double A = -0.75;
  // |x| <= 1: ((A + 2) x - (A + 3)) x^2 + 1; 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A.
  auto near = [&](Value x) {
    return b.binary("add", b.binary("multiply", b.binary("multiply", b.binary("subtract",
        b.binary("multiply", c(A + 2), x), c(A + 3)), x), x), c(1.0));
  };
  auto far = [&](Value x) {
    Value v = b.binary("subtract", b.binary("multiply", c(A), x), c(5 * A));
    v = b.binary("add", b.binary("multiply", v, x), c(8 * A));
    return b.binary("subtract", b.binary("multiply", v, x), c(4 * A));
  };
  Cubic1d r;
  r.weight[0] = far(b.binary("add", t, c(1.0)));
  r.weight[1] = near(t);
  r.weight[2] = near(b.binary("subtract", c(1.0), t));
  r.weight[3] = far(b.binary("subtract", c(2.0), t));
  Value base = b.convert(fl, ElementType::kS64);
  for (int k = 0; k < 4; ++k) {
    Value i = b.binary("add", base, b.splat(b.constant_int(k - 1, ElementType::kS64), {out}));
    r.index[k] = b.clamp(b.splat(b.constant_int(0, ElementType::kS64), {out}), i,
                         b.splat(b.constant_int(in - 1, ElementType::kS64), {out}));
  }
  return r;
}

// Antialiased bilinear or bicubic (a triangle, or Keys' cubic with a =
// -0.5, widened by the scale when shrinking, each row normalised to sum 1),
// as an [out, in] f32 matrix: output i takes the inputs j in [floor(c -
// support + 0.5), floor(c + support + 0.5)) around its center c = scale (i +
// 0.5); the support is 1 (bilinear) or 2 (bicubic), times the scale when
// shrinking.
Value antialias_weights(Builder& b, int64_t in, int64_t out, float scale, bool cubic = false) {
  std::vector<int64_t> oi{out, in};
  auto c = [&](double v) { return b.splat(b.constant(v, ElementType::kF32), oi); };
  double half = cubic ? 2.0 : 1.0;
  double support = scale >= 1 ? half * scale : half, inv = scale >= 1 ? 1.0 / scale : 1.0;
  Value i = b.convert(b.iota(TensorType{ElementType::kS64, oi}, 0), ElementType::kF32);
  Value j = b.convert(b.iota(TensorType{ElementType::kS64, oi}, 1), ElementType::kF32);
  Value center = b.binary("multiply", c(scale), b.binary("add", i, c(0.5)));
  Value lo = b.binary("maximum", b.unary("floor", b.binary("add", b.binary("subtract", center, c(support)), c(0.5))),
                      c(0.0));
  Value hi = b.binary("minimum", b.unary("floor", b.binary("add", b.binary("add", center, c(support)), c(0.5))),
                      c(static_cast<double>(in)));
  Value inside = b.binary("and", b.compare(j, lo, hlo::Compare::kGe), b.compare(j, hi, hlo::Compare::kLt));
  Value dist = b.unary("abs", b.binary("multiply", b.binary("add", b.binary("subtract", j, center), c(0.5)), c(inv)));
  Value filtered;
  if (cubic) {
    // Keys: |t| < 1: ((a + 2)|t| - (a + 3))t^2 + 1; |t| < 2: (((|t| - 5)|t| + 8)|t| - 4) a.
    double a = -0.5;
    Value t2 = b.binary("multiply", dist, dist);
    Value near = b.binary("add", b.binary("multiply", b.binary("subtract", b.binary("multiply", c(a + 2), dist),
                                                                 c(a + 3)), t2), c(1.0));
    Value far = b.binary("multiply", b.binary("subtract", b.binary("multiply",
                    b.binary("add", b.binary("multiply", b.binary("subtract", dist, c(5.0)), dist), c(8.0)), dist),
                    c(4.0)), c(a));
    filtered = b.select(b.compare(dist, c(1.0), hlo::Compare::kLt), near,
                        b.select(b.compare(dist, c(2.0), hlo::Compare::kLt), far, c(0.0)));
  } else {
    filtered = b.binary("maximum", b.binary("subtract", c(1.0), dist), c(0.0));
  }
  Value w = b.select(inside, filtered, c(0.0));
  Value total = b.broadcast_in_dim(reduce(b, w, {1}, ReduceKind::kSum), oi, {0});
  Value nonzero = b.compare(total, c(0.0), hlo::Compare::kNe);
  return b.select(nonzero, b.binary("divide", w, b.select(nonzero, total, c(1.0))), c(0.0));
}

// x [N, C, H, W] with dim 2 or 3 mapped through m ([out, in] for the
// forward, its transpose's contraction for the backward).
Value apply_along(Builder& b, Value x, Value m, int64_t dim, bool transpose_m) {
  int64_t contract_m = transpose_m ? 0 : 1;
  Value r = b.dot_general(x, m, {}, {}, {dim}, {contract_m}, b.element_type(x));
  // The mapped dim comes out last: move it back for dim 2.
  return dim == 3 ? r : b.transpose(r, {0, 1, 3, 2});
}

// The scale argument positions of an op: after (self, output_size[,
// input_size], align_corners?), one per spatial dim.
std::vector<int> scale_args(int64_t first, int64_t spatial) {
  std::vector<int> r;
  for (int64_t i = 0; i < spatial; ++i) r.push_back(static_cast<int>(first + i));
  return r;
}

LoweringRegistrar registrar([] {
  // upsample_nearest{1,2,3}d and _upsample_nearest_exact{1,2,3}d(self,
  // output_size, scales...) and backward (grad, output_size, input_size, scales...).
  for (bool exact : {false, true}) {
    for (int64_t spatial : {1, 2, 3}) {
      std::string name = std::string(exact ? "aten::_upsample_nearest_exact" : "aten::upsample_nearest") +
                         std::to_string(spatial) + "d";
      register_lowering(name, [spatial, exact](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x = ctx.tensor(0);
        auto dims = b.dims(x);
        auto size = ctx.int_list(1);
        for (int64_t i = 0; i < spatial; ++i) {
          int64_t dim = 2 + i;
          float scale = pixel_scale(dims[dim], size[i], false, optional_scale(ctx, 2 + i));
          x = take(b, x, dim, nearest_index(b, dims[dim], size[i], scale, exact));
        }
        return std::vector<Value>{x};
      }, {name + ".out"}, scale_args(2, spatial));
      register_lowering(name + "_backward", [spatial, exact](LoweringContext& ctx) {
        Builder& b = ctx.b;
        ElementType acc = et(opmath_type(ctx.dtype(0)));
        Value g = b.convert(ctx.tensor(0), acc);
        auto out = ctx.int_list(1), in = ctx.int_list(2);
        for (int64_t i = spatial - 1; i >= 0; --i) {
          int64_t dim = 2 + i;
          float scale = pixel_scale(in[dim], out[i], false, optional_scale(ctx, 3 + i));
          g = put_add(b, g, dim, nearest_index(b, in[dim], out[i], scale, exact), in[dim]);
        }
        return std::vector<Value>{b.convert(g, et(ctx.dtype(0)))};
      }, {name + "_backward.grad_input"}, scale_args(3, spatial));
    }
  }

  // upsample_{linear1d,bilinear2d,trilinear3d}(self, output_size,
  // align_corners, scales...) and backward (grad, output_size, input_size,
  // align_corners, scales...).
  for (auto [spatial, base] : {std::pair<int64_t, const char*>{1, "linear1d"}, {2, "bilinear2d"},
                               {3, "trilinear3d"}}) {
    std::string name = std::string("aten::upsample_") + base;
    register_lowering(name, [spatial](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = ctx.dtype(0);
      ElementType acc = et(opmath_type(type));
      Value x = b.convert(ctx.tensor(0), acc);
      auto size = ctx.int_list(1);
      bool align = ctx.bool_arg(2);
      for (int64_t i = 0; i < spatial; ++i) {
        int64_t dim = 2 + i;
        int64_t in = b.dims(x)[dim];
        Linear1d l = linear_index(b, in, size[i], pixel_scale(in, size[i], align, optional_scale(ctx, 3 + i)), align);
        Value lo = take(b, x, dim, l.lo), hi = take(b, x, dim, l.hi);
        Value w = weight_along(b, b.convert(l.weight_hi, acc), b.dims(lo), dim);
        x = b.binary("add", lo, b.binary("multiply", w, b.binary("subtract", hi, lo)));
      }
      return std::vector<Value>{b.convert(x, et(type))};
    }, {name + ".out"}, scale_args(3, spatial));
    register_lowering(name + "_backward", [spatial](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = ctx.dtype(0);
      ElementType acc = et(opmath_type(type));
      Value g = b.convert(ctx.tensor(0), acc);
      auto out = ctx.int_list(1), in = ctx.int_list(2);
      bool align = ctx.bool_arg(3);
      for (int64_t i = spatial - 1; i >= 0; --i) {
        int64_t dim = 2 + i;
        Linear1d l = linear_index(b, in[dim], out[i], pixel_scale(in[dim], out[i], align, optional_scale(ctx, 4 + i)),
                                  align);
        Value w = weight_along(b, b.convert(l.weight_hi, acc), b.dims(g), dim);
        Value one = b.splat(b.constant(1.0, acc), b.dims(g));
        Value to_lo = b.binary("multiply", g, b.binary("subtract", one, w));
        Value to_hi = b.binary("multiply", g, w);
        g = b.binary("add", put_add(b, to_lo, dim, l.lo, in[dim]), put_add(b, to_hi, dim, l.hi, in[dim]));
      }
      return std::vector<Value>{b.convert(g, et(type))};
    }, {name + "_backward.grad_input"}, scale_args(4, spatial));
  }

  // upsample_bicubic2d(self, output_size, align_corners, scales_h, scales_w)
  // and backward (grad, output_size, input_size, align_corners, scales...).
  register_lowering("aten::upsample_bicubic2d", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(0), acc);
    auto size = ctx.int_list(1);
    bool align = ctx.bool_arg(2);
    for (int64_t i = 0; i < 2; ++i) {
      int64_t dim = 2 + i;
      int64_t in = b.dims(x)[dim];
      Cubic1d c = cubic_index(b, in, size[i], pixel_scale(in, size[i], align, optional_scale(ctx, 3 + i)), align);
      Value sum;
      for (int k = 0; k < 4; ++k) {
        Value tap = take(b, x, dim, c.index[k]);
        Value term = b.binary("multiply", tap, weight_along(b, b.convert(c.weight[k], acc), b.dims(tap), dim));
        sum = k == 0 ? term : b.binary("add", sum, term);
      }
      x = sum;
    }
    return std::vector<Value>{b.convert(x, et(type))};
  }, {"aten::upsample_bicubic2d.out"}, scale_args(3, 2));
  register_lowering("aten::upsample_bicubic2d_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value g = b.convert(ctx.tensor(0), acc);
    auto out = ctx.int_list(1), in = ctx.int_list(2);
    bool align = ctx.bool_arg(3);
    for (int64_t i = 1; i >= 0; --i) {
      int64_t dim = 2 + i;
      Cubic1d c = cubic_index(b, in[dim], out[i], pixel_scale(in[dim], out[i], align, optional_scale(ctx, 4 + i)),
                              align);
      Value sum;
      for (int k = 0; k < 4; ++k) {
        Value part = put_add(b, b.binary("multiply", g, weight_along(b, b.convert(c.weight[k], acc), b.dims(g), dim)),
                             dim, c.index[k], in[dim]);
        sum = k == 0 ? part : b.binary("add", sum, part);
      }
      g = sum;
    }
    return std::vector<Value>{b.convert(g, et(type))};
  }, {"aten::upsample_bicubic2d_backward.grad_input"}, scale_args(4, 2));

  // _upsample_{bilinear,bicubic}2d_aa(self, output_size, align_corners,
  // scales_h, scales_w) and backward (grad, output_size, input_size,
  // align_corners, scales...): a filter-matrix product per spatial dim.
  for (bool cubic : {false, true}) {
    std::string name = cubic ? "aten::_upsample_bicubic2d_aa" : "aten::_upsample_bilinear2d_aa";
    register_lowering(name, [cubic, name](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = ctx.dtype(0);
      ElementType acc = et(opmath_type(type));
      Value x = b.convert(ctx.tensor(0), acc);
      TORCH_CHECK(b.type(x).rank() == 4, name.substr(6), ": expected a 4-D input, got ",
                  b.type(x).rank(), "-D");
      auto size = ctx.int_list(1);
      bool align = ctx.bool_arg(2);
      for (int64_t i = 0; i < 2; ++i) {
        int64_t dim = 2 + i, in = b.dims(x)[dim];
        Value m = b.convert(antialias_weights(b, in, size[i],
                                              pixel_scale(in, size[i], align, optional_scale(ctx, 3 + i)), cubic),
                            acc);
        x = apply_along(b, x, m, dim, false);
      }
      return std::vector<Value>{b.convert(x, et(type))};
    }, {name + ".out"}, scale_args(3, 2));
    register_lowering(name + "_backward", [cubic](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = ctx.dtype(0);
      ElementType acc = et(opmath_type(type));
      Value g = b.convert(ctx.tensor(0), acc);
      auto out = ctx.int_list(1), in = ctx.int_list(2);
      bool align = ctx.bool_arg(3);
      for (int64_t i = 1; i >= 0; --i) {
        int64_t dim = 2 + i;
        Value m = b.convert(antialias_weights(b, in[dim], out[i],
                                              pixel_scale(in[dim], out[i], align, optional_scale(ctx, 4 + i)),
                                              cubic),
                            acc);
        g = apply_along(b, g, m, dim, true);
      }
      return std::vector<Value>{b.convert(g, et(type))};
    }, {name + "_backward.grad_input"}, scale_args(4, 2));
  }
});

}  // namespace
}  // namespace torch_pjrt::ops
