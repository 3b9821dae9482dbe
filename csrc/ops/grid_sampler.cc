// grid_sampler_2d and grid_sampler_3d (what F.grid_sample calls) and their
// backward ops. Each grid point's coordinates are unnormalized to input
// pixels and mapped by the padding mode (zeros, border, reflection); the
// interpolation (bilinear/trilinear, nearest, bicubic in 2-D) then reads a
// few input pixels ("taps") with weights. All taps are read with one gather
// of clamped flat indices, out-of-range taps masked to zero; the backward
// scatters the output gradient to the same taps and differentiates the
// weights for the grid's gradient.
//
// Coordinates and weights are f32. For bfloat16 the CPU kernel rounds every
// intermediate to bfloat16 (the grid coordinates included, which moves the
// sampled position by up to a sixteenth of a pixel), so the forward rounds
// at the same steps, in the same order, to give the CPU's results.
#include <c10/util/Exception.h>

#include <string>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

enum Interpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

constexpr double kCubicA = -0.75;  // the cubic convolution's parameter, as torch's

// The input pixels read ("taps") for every grid point, T of them per
// point, each [T, G] (G: grid points): flat index into the [N * pixels, C]
// input (clamped), whether it is inside the input, and its weight with its
// derivative by each grid coordinate. Bicubic taps come in rows of four
// (t = 4 * row + column): the weight is the column weight `inner` times the
// row weight `outer`, kept apart for the CPU's order of rounding.
struct Taps {
  int64_t count = 0;
  int64_t group = 0;  // taps summed before their common outer weight
  Value index, valid, weight, inner, outer;  // outer invalid: none
  std::vector<Value> dweight;
};

// Elementwise f32 math on tensors of `dims`, rounding each result to
// bfloat16 when `emulate` (see the file comment).
struct Math {
  Builder& b;
  std::vector<int64_t> dims;
  bool emulate;

  Value c(double v) const { return b.splat(b.constant(v, ElementType::kF32), dims); }
  Value r(Value v) const {
    return emulate ? b.convert(b.convert(v, ElementType::kBF16), ElementType::kF32) : v;
  }
  Value add(Value x, Value y) const { return r(b.binary("add", x, y)); }
  Value sub(Value x, Value y) const { return r(b.binary("subtract", x, y)); }
  Value mul(Value x, Value y) const { return r(b.binary("multiply", x, y)); }
  Value div(Value x, Value y) const { return r(b.binary("divide", x, y)); }
  Value lt(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kLt); }
  Value le(Value x, Value y) const { return b.compare(x, y, hlo::Compare::kLe); }
  Value select(Value p, Value x, Value y) const { return b.select(p, x, y); }
  Value both(Value p, Value q) const { return b.binary("and", p, q); }
  // A [G] vector repeated for each of the T taps.
  Value per_tap(Value v) const { return b.broadcast_in_dim(v, dims, {static_cast<int64_t>(dims.size()) - 1}); }
};

// Grid value in [-1, 1] -> input pixel coordinate; `mult` gets d/d value.
Value unnormalize(const Math& m, Value v, int64_t size, bool align, Value* mult) {
  if (align) {
    if (mult) *mult = m.c((size - 1) / 2.0);
    return m.mul(m.div(m.add(v, m.c(1)), m.c(2)), m.c(static_cast<double>(size - 1)));
  }
  if (mult) *mult = m.c(size / 2.0);
  return m.div(m.sub(m.mul(m.add(v, m.c(1)), m.c(static_cast<double>(size))), m.c(1)), m.c(2));
}

// Clamps to [0, size - 1]; the derivative is 0 at and past the borders.
Value clip(const Math& m, Value x, int64_t size, Value* grad) {
  Value hi = m.c(static_cast<double>(size - 1));
  if (grad) {
    Value inside = m.both(m.lt(m.c(0), x), m.lt(x, hi));
    *grad = m.select(inside, m.c(1), m.c(0));
  }
  return m.b.clamp(m.c(0), x, hi);
}

// Reflects x at twice_low / 2 and twice_high / 2 until it lies between.
Value reflect(const Math& m, Value x, int64_t twice_low, int64_t twice_high, Value* grad) {
  if (twice_low == twice_high) {
    if (grad) *grad = m.c(0);
    return m.c(0);
  }
  Builder& b = m.b;
  Value low = m.c(twice_low / 2.0), span = m.c((twice_high - twice_low) / 2.0);
  Value shifted = m.sub(x, low);
  Value negative = m.lt(shifted, m.c(0));
  Value dist = b.unary("abs", shifted);
  Value extra = b.binary("remainder", dist, span);
  Value flips = b.unary("floor", m.div(dist, span));
  Value even = b.compare(b.binary("remainder", flips, m.c(2)), m.c(0), hlo::Compare::kEq);
  if (grad) {
    // +1 where the reflected coordinate moves with x, -1 where against it.
    *grad = m.select(b.binary("xor", even, negative), m.c(1), m.c(-1));
  }
  return m.select(even, m.add(extra, low), m.add(m.sub(span, extra), low));
}

// The padding mode's map of a pixel coordinate; `grad` gets its derivative.
Value pad_coordinate(const Math& m, Value x, int64_t size, int64_t padding, bool align, Value* grad) {
  if (padding == kBorder) return clip(m, x, size, grad);
  if (padding == kReflection) {
    Value g1, g2;
    x = align ? reflect(m, x, 0, 2 * (size - 1), grad ? &g1 : nullptr)
              : reflect(m, x, -1, 2 * size - 1, grad ? &g1 : nullptr);
    x = clip(m, x, size, grad ? &g2 : nullptr);
    if (grad) *grad = m.b.binary("multiply", g1, g2);
    return x;
  }
  if (grad) *grad = m.c(1);
  return x;
}

struct Sampling {
  int nd = 0;
  std::vector<int64_t> size, stride;  // per coordinate (x, y, z): input size and flat stride
  std::vector<Value> coord;           // f32 [G] per coordinate: the grid's values
  Value base;                         // s64 [G]: each point's batch offset n * pixels
  int64_t interpolation = 0, padding = 0;
  bool align = false;
};

// Flat indices and validity of integer pixel positions `pos` ([T, G] each).
void locate(const Math& m, const Sampling& s, const std::vector<Value>& pos, Taps& t) {
  Builder& b = m.b;
  Value index = m.per_tap(s.base);
  for (int j = 0; j < s.nd; ++j) {
    Value hi = m.c(static_cast<double>(s.size[j] - 1));
    Value inside = m.both(m.le(m.c(0), pos[j]), m.le(pos[j], hi));
    t.valid = j == 0 ? inside : m.both(t.valid, inside);
    Value at = b.convert(b.clamp(m.c(0), pos[j], hi), ElementType::kS64);
    at = b.binary("multiply", at, b.splat(b.constant_int(s.stride[j], ElementType::kS64), m.dims));
    index = b.binary("add", index, at);
  }
  t.index = index;
}

// The cubic convolution weights of the four taps at t - 1, t, t + 1, t + 2
// for fraction t, and their derivatives by t.
void cubic_weights(const Math& m, Value t, Value w[4], Value dw[4]) {
  const double a = kCubicA;
  auto near = [&](Value x) {  // |x| <= 1: ((a + 2) x - (a + 3)) x^2 + 1
    return m.add(m.mul(m.mul(m.sub(m.mul(m.c(a + 2), x), m.c(a + 3)), x), x), m.c(1));
  };
  auto far = [&](Value x) {  // 1 < |x| < 2: ((a x - 5a) x + 8a) x - 4a
    return m.sub(m.mul(m.add(m.mul(m.sub(m.mul(m.c(a), x), m.c(5 * a)), x), m.c(8 * a)), x), m.c(4 * a));
  };
  Builder& b = m.b;
  auto f = [&](Value x, double c2, double c1, double c0) {  // c2 x^2 + c1 x + c0, unrounded
    return b.binary("add", b.binary("multiply", b.binary("add", b.binary("multiply", m.c(c2), x), m.c(c1)), x), m.c(c0));
  };
  auto dnear = [&](Value x) { return f(x, 3 * (a + 2), -2 * (a + 3), 0); };
  auto dfar = [&](Value x) { return f(x, 3 * a, -10 * a, 8 * a); };
  Value t1 = m.add(t, m.c(1)), u = m.sub(m.c(1), t), u1 = m.add(u, m.c(1));
  w[0] = far(t1);
  w[1] = near(t);
  w[2] = near(u);
  w[3] = far(u1);
  dw[0] = dfar(t1);
  dw[1] = dnear(t);
  dw[2] = b.unary("negate", dnear(u));
  dw[3] = b.unary("negate", dfar(u1));
}

// [4] vectors of [G] -> [16, G] with entry 4 * row + column taking vector
// `column` (along_row false) or `row`.
Value spread16(Builder& b, const Value v[4], bool along_row, int64_t g) {
  std::vector<Value> rows;
  for (int i = 0; i < 4; ++i) rows.push_back(b.reshape(v[i], {1, g}));
  Value stacked = b.concatenate(rows, 0);
  return b.reshape(b.broadcast_in_dim(stacked, {4, 4, g}, {along_row ? int64_t{0} : int64_t{1}, 2}), {16, g});
}

// Tap number t's bit or digit: (t / step) % base, as f32 [T, G].
Value tap_digit(const Math& m, int64_t step, int64_t base) {
  Builder& b = m.b;
  Value t = b.iota(TensorType{ElementType::kS64, m.dims}, 0);
  auto s64 = [&](int64_t v) { return b.splat(b.constant_int(v, ElementType::kS64), m.dims); };
  return b.convert(b.binary("remainder", b.binary("divide", t, s64(step)), s64(base)), ElementType::kF32);
}

// The taps of every grid point; `mult` gets, per coordinate, the derivative
// of the pixel coordinate by the grid value (the backward's chain factor).
Taps taps(const Math& m, const Sampling& s, std::vector<Value>* mult) {
  Builder& b = m.b;
  int64_t g = m.dims[0];
  std::vector<Value> x(s.nd), unnorm(s.nd);
  if (mult) mult->resize(s.nd);
  for (int j = 0; j < s.nd; ++j) {
    x[j] = unnormalize(m, s.coord[j], s.size[j], s.align, &unnorm[j]);
    if (s.interpolation != kBicubic) {
      Value pad_grad;
      x[j] = pad_coordinate(m, x[j], s.size[j], s.padding, s.align, &pad_grad);
      unnorm[j] = b.binary("multiply", unnorm[j], pad_grad);
    }
    if (mult) (*mult)[j] = unnorm[j];
  }
  Taps t;
  if (s.interpolation == kNearest) {
    Math mt{b, {1, g}, m.emulate};
    std::vector<Value> pos;
    for (int j = 0; j < s.nd; ++j) pos.push_back(b.reshape(b.unary("round_nearest_even", x[j]), {1, g}));
    t.count = t.group = 1;
    locate(mt, s, pos, t);
    t.weight = t.inner = mt.c(1);
    t.dweight.assign(s.nd, mt.c(0));
    return t;
  }
  std::vector<Value> lo(s.nd);
  for (int j = 0; j < s.nd; ++j) lo[j] = b.unary("floor", x[j]);
  if (s.interpolation == kBilinear) {
    // Corner t takes lo + 1 along coordinate j where bit j of t is set (x
    // fastest, the CPU's order).
    t.count = t.group = int64_t{1} << s.nd;
    Math mt{b, {t.count, g}, m.emulate};
    std::vector<Value> pos(s.nd), factor(s.nd), sign(s.nd);
    for (int j = 0; j < s.nd; ++j) {
      Value hi = b.compare(tap_digit(mt, int64_t{1} << j, 2), mt.c(1), hlo::Compare::kEq);
      Value low = mt.per_tap(lo[j]);
      pos[j] = mt.select(hi, b.binary("add", low, mt.c(1)), low);
      Value to_hi = m.sub(x[j], lo[j]);                              // x - x0
      Value to_lo = m.sub(m.r(b.binary("add", lo[j], m.c(1))), x[j]);  // x1 - x
      factor[j] = mt.select(hi, mt.per_tap(to_hi), mt.per_tap(to_lo));
      sign[j] = mt.select(hi, mt.c(1), mt.c(-1));
    }
    locate(mt, s, pos, t);
    t.weight = factor[0];
    for (int j = 1; j < s.nd; ++j) t.weight = mt.mul(t.weight, factor[j]);
    t.inner = t.weight;
    for (int j = 0; j < s.nd; ++j) {
      Value d = sign[j];
      for (int k = 0; k < s.nd; ++k) {
        if (k != j) d = b.binary("multiply", d, factor[k]);
      }
      t.dweight.push_back(d);
    }
    return t;
  }
  // Bicubic (2-D): rows of four taps around (floor(x) - 1 .. floor(x) + 2);
  // each tap's position goes through the padding mode on its own.
  t.count = 16;
  t.group = 4;
  Math mt{b, {16, g}, m.emulate};
  Value wx[4], dwx[4], wy[4], dwy[4];
  cubic_weights(m, m.sub(x[0], lo[0]), wx, dwx);
  cubic_weights(m, m.sub(x[1], lo[1]), wy, dwy);
  Value px = b.binary("add", mt.per_tap(lo[0]), b.binary("subtract", tap_digit(mt, 1, 4), mt.c(1)));
  Value py = b.binary("add", mt.per_tap(lo[1]), b.binary("subtract", tap_digit(mt, 4, 4), mt.c(1)));
  px = pad_coordinate(mt, px, s.size[0], s.padding, s.align, nullptr);
  py = pad_coordinate(mt, py, s.size[1], s.padding, s.align, nullptr);
  locate(mt, s, {px, py}, t);
  t.inner = spread16(b, wx, false, g);
  t.outer = spread16(b, wy, true, g);
  t.weight = b.binary("multiply", t.inner, t.outer);
  t.dweight = {b.binary("multiply", spread16(b, dwx, false, g), t.outer),
               b.binary("multiply", t.inner, spread16(b, dwy, true, g))};
  return t;
}

struct Operands {
  Sampling s;
  Value table;  // f32 [N * pixels, C]: the input, channels last
  std::vector<int64_t> input_dims, grid_dims, out_dims;  // out: [N, C, grid's spatial...]
  int64_t n = 0, c = 0, g = 0, pixels = 1;
};

Operands operands(LoweringContext& ctx, const std::string& op, int nd, Value input, Value grid,
                  c10::ScalarType type, c10::ScalarType grid_type, int64_t interpolation, int64_t padding,
                  bool align) {
  Builder& b = ctx.b;
  Operands o;
  o.input_dims = b.dims(input);
  o.grid_dims = b.dims(grid);
  const auto& in = o.input_dims;
  const auto& gd = o.grid_dims;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(type), "\"", op, "\" not implemented for '", c10::toString(type), "'");
  TORCH_CHECK(type == grid_type, "grid_sampler(): expected input and grid to have the same dtype, but input has ",
              c10::toString(type), " and grid has ", c10::toString(grid_type));
  TORCH_CHECK(static_cast<int>(in.size()) == nd + 2 && static_cast<int>(gd.size()) == nd + 2,
              "grid_sampler(): expected ", nd + 2, "D input and grid");
  TORCH_CHECK(in[0] == gd[0], "grid_sampler(): expected grid and input to have same batch size");
  TORCH_CHECK(gd[nd + 1] == nd, "grid_sampler(): expected grid to have size ", nd, " in last dimension");
  for (int i = 2; i < nd + 2; ++i) {
    TORCH_CHECK(in[i] > 0, "grid_sampler(): expected input to have non-empty spatial dimensions, but dimension ",
                i, " is empty");
  }
  TORCH_CHECK(interpolation >= kBilinear && interpolation <= kBicubic, "grid_sampler(): unknown interpolation mode ",
              interpolation);
  TORCH_CHECK(padding >= kZeros && padding <= kReflection, "grid_sampler(): unknown padding mode ", padding);
  TORCH_CHECK(interpolation != kBicubic || nd == 2, "grid_sampler(): bicubic interpolation only supports 4D input");
  o.n = in[0];
  o.c = in[1];
  o.out_dims = {in[0], in[1]};
  int64_t points = 1;
  for (int i = 0; i < nd; ++i) {
    o.out_dims.push_back(gd[1 + i]);
    points *= gd[1 + i];
    o.pixels *= in[2 + i];
  }
  o.g = o.n * points;
  Sampling& s = o.s;
  s.nd = nd;
  s.interpolation = interpolation;
  s.padding = padding;
  s.align = align;
  int64_t stride = 1;
  for (int j = 0; j < nd; ++j) {  // coordinate j indexes spatial dim nd - 1 - j
    s.size.push_back(in[2 + nd - 1 - j]);
    s.stride.push_back(stride);
    stride *= s.size.back();
  }
  if (o.g == 0 || o.c == 0) return o;
  Value flat_grid = b.reshape(b.convert(grid, ElementType::kF32), {o.g, nd});
  for (int j = 0; j < nd; ++j) {
    s.coord.push_back(b.reshape(b.slice(flat_grid, {0, j}, {o.g, j + 1}, {1, 1}), {o.g}));
  }
  Value batch = b.reshape(b.iota(TensorType{ElementType::kS64, {o.n, points}}, 0), {o.g});
  s.base = b.binary("multiply", batch, b.splat(b.constant_int(o.pixels, ElementType::kS64), {o.g}));
  Value x = b.reshape(b.convert(input, ElementType::kF32), {o.n, o.c, o.pixels});
  o.table = b.reshape(b.transpose(x, {0, 2, 1}), {o.n * o.pixels, o.c});
  return o;
}

// The taps' input values, [T, G, C], zero outside the input.
Value read_taps(Builder& b, const Operands& o, const Taps& t) {
  int64_t count = t.count * o.g;
  Builder::GatherDims gd{{1}, {0}, {0}, 1};
  Value all = b.gather(o.table, b.reshape(t.index, {count, 1}), gd, {1, o.c}, {count, o.c});
  std::vector<int64_t> dims = {t.count, o.g, o.c};
  return b.select(b.broadcast_in_dim(t.valid, dims, {0, 1}), b.reshape(all, dims),
                  b.zeros(TensorType{ElementType::kF32, dims}));
}

// [G, C] -> [N, C, spatial...] and back.
Value to_output(Builder& b, const Operands& o, Value v) {
  Value t = b.transpose(b.reshape(v, {o.n, o.g / o.n, o.c}), {0, 2, 1});
  return b.reshape(t, o.out_dims);
}
Value from_output(Builder& b, const Operands& o, Value v) {
  Value t = b.transpose(b.reshape(v, {o.n, o.c, o.g / o.n}), {0, 2, 1});
  return b.reshape(t, {o.g, o.c});
}

// The weighted sum of the taps' values, [G, C]. Emulating bfloat16, each
// product and sum is rounded in the CPU's order: taps one by one within a
// group, times the group's outer weight, groups one by one.
Value interpolate(Builder& b, const Operands& o, const Taps& t, Value values, bool emulate) {
  std::vector<int64_t> dims = {t.count, o.g, o.c};
  if (!emulate) {
    Value terms = b.binary("multiply", values, b.broadcast_in_dim(t.weight, dims, {0, 1}));
    return reduce(b, terms, {0}, ReduceKind::kSum);
  }
  auto r = [&](Value v) { return b.convert(b.convert(v, ElementType::kBF16), ElementType::kF32); };
  auto tap = [&](Value v, int64_t i) {  // row i of [T, G] or [T, G, C], as [G, C]
    auto d = b.dims(v);
    std::vector<int64_t> lo(d.size(), 0), hi = d, st(d.size(), 1);
    lo[0] = i;
    hi[0] = i + 1;
    Value row = b.slice(v, lo, hi, st);
    return d.size() == 3 ? b.reshape(row, {o.g, o.c}) : b.broadcast_in_dim(b.reshape(row, {o.g}), {o.g, o.c}, {0});
  };
  Value out;
  for (int64_t first = 0; first < t.count; first += t.group) {
    Value sum;
    for (int64_t i = first; i < first + t.group; ++i) {
      Value term = r(b.binary("multiply", tap(values, i), tap(t.inner, i)));
      sum = sum.valid() ? r(b.binary("add", sum, term)) : term;
    }
    if (t.outer.valid()) sum = r(b.binary("multiply", sum, tap(t.outer, first)));
    out = out.valid() ? r(b.binary("add", out, sum)) : sum;
  }
  return out;
}

void register_grid_sampler(int nd) {
  std::string name = "aten::grid_sampler_" + std::to_string(nd) + "d";
  // grid_sampler_{n}d(input, grid, interpolation_mode, padding_mode, align_corners)
  register_lowering(name, [nd, name](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    Operands o = operands(ctx, name, nd, ctx.tensor(0), ctx.tensor(1), type, ctx.dtype(1), ctx.int_arg(2),
                          ctx.int_arg(3), ctx.bool_arg(4));
    if (o.g == 0 || o.c == 0) return std::vector<Value>{b.zeros(TensorType{et(type), o.out_dims})};
    Math m{b, {o.g}, type == c10::ScalarType::BFloat16};
    Taps t = taps(m, o.s, nullptr);
    Value out = interpolate(b, o, t, read_taps(b, o, t), m.emulate);
    return std::vector<Value>{b.convert(to_output(b, o, out), et(type))};
  }, {name + ".out"});

  // grid_sampler_{n}d_backward(grad_output, input, grid, interpolation_mode,
  //                            padding_mode, align_corners, output_mask)
  register_lowering(name + "_backward", [nd, name](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    Operands o = operands(ctx, name, nd, ctx.tensor(1), ctx.tensor(2), type, ctx.dtype(2), ctx.int_arg(3),
                          ctx.int_arg(4), ctx.bool_arg(5));
    if (o.g == 0 || o.c == 0) {
      return std::vector<Value>{b.zeros(TensorType{et(type), o.input_dims}),
                                b.zeros(TensorType{et(type), o.grid_dims})};
    }
    Math m{b, {o.g}, type == c10::ScalarType::BFloat16};
    std::vector<Value> mult;
    Taps t = taps(m, o.s, &mult);
    std::vector<int64_t> dims = {t.count, o.g, o.c};
    Value gout = b.broadcast_in_dim(from_output(b, o, b.convert(ctx.tensor(0), ElementType::kF32)), dims, {1, 2});
    // The input's gradient: the output gradient times each tap's weight,
    // added at the tap (one scatter for all taps).
    Value w = b.select(t.valid, t.weight, b.zeros(TensorType{ElementType::kF32, {t.count, o.g}}));
    Value updates = b.reshape(b.binary("multiply", gout, b.broadcast_in_dim(w, dims, {0, 1})), {t.count * o.g, o.c});
    Builder::ScatterDims sd{{1}, {0}, {0}, 1};
    Value table_grad = b.scatter(b.zeros(TensorType{ElementType::kF32, {o.n * o.pixels, o.c}}),
                                 b.reshape(t.index, {t.count * o.g, 1}), updates, sd,
                                 [](Builder& r, const std::vector<Value>& a) {
                                   return std::vector<Value>{r.binary("add", a[0], a[1])};
                                 });
    Value input_grad = b.transpose(b.reshape(table_grad, {o.n, o.pixels, o.c}), {0, 2, 1});
    input_grad = b.reshape(input_grad, o.input_dims);
    // The grid's: per tap, the output gradient dotted with the tap's value
    // over channels, times the weight's derivative, through the chain factor.
    std::vector<Value> columns;
    Value dot;
    if (o.s.interpolation != kNearest) {
      dot = reduce(b, b.binary("multiply", gout, read_taps(b, o, t)), {2}, ReduceKind::kSum);
    }
    for (int j = 0; j < nd; ++j) {
      Value gj = o.s.interpolation == kNearest
                     ? m.c(0)
                     : b.binary("multiply", reduce(b, b.binary("multiply", dot, t.dweight[j]), {0}, ReduceKind::kSum),
                                mult[j]);
      columns.push_back(b.reshape(gj, {o.g, 1}));
    }
    Value gg = b.reshape(b.concatenate(columns, 1), o.grid_dims);
    return std::vector<Value>{b.convert(input_grad, et(type)), b.convert(gg, et(type))};
  }, {name + "_backward.out"});
}

LoweringRegistrar registrar([] {
  register_grid_sampler(2);
  register_grid_sampler(3);
});

}  // namespace
}  // namespace torch_pjrt::ops
