// Random numbers on the device: uniform_, normal_, bernoulli, random_
// (randint), native_dropout, rrelu and randperm, drawn with StableHLO's counter-
// based generator from the per-device generator's (seed, offset).
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "ops/helpers.h"
#include "ops/random_draws.h"

namespace torch_pjrt::ops {

Value uniform01(LoweringContext& ctx, const std::vector<int64_t>& dims, ElementType type) {
  Builder& b = ctx.b;
  if (type == ElementType::kF64) {
    Value bits = ctx.random_bits(TensorType{ElementType::kU64, dims});
    Value mantissa = b.binary("shift_right_logical", bits, b.splat(b.constant_int(12, ElementType::kU64), dims));
    Value one_bits = b.splat(b.constant_int(0x3FF0000000000000LL, ElementType::kU64), dims);
    Value f = b.bitcast_convert(b.binary("or", mantissa, one_bits), ElementType::kF64);
    return b.binary("subtract", f, b.splat(b.constant(1.0, ElementType::kF64), dims));
  }
  Value bits = ctx.random_bits(TensorType{ElementType::kU32, dims});
  Value mantissa = b.binary("shift_right_logical", bits, b.splat(b.constant_int(9, ElementType::kU32), dims));
  Value one_bits = b.splat(b.constant_int(0x3F800000, ElementType::kU32), dims);
  Value f = b.bitcast_convert(b.binary("or", mantissa, one_bits), ElementType::kF32);
  f = b.binary("subtract", f, b.splat(b.constant(1.0, ElementType::kF32), dims));
  if (type == ElementType::kF32) return f;
  // Rounding to a narrower float may give 1.0; keep the interval half-open.
  Value narrow = b.convert(f, type);
  Value one = b.splat(b.constant(1.0, type), dims);
  Value below_one = b.splat(b.constant(type == ElementType::kBF16 ? 0.99609375 : 0.99951171875, type), dims);
  return b.select(b.compare(narrow, one, hlo::Compare::kGe), below_one, narrow);
}

Value standard_normal(LoweringContext& ctx, const std::vector<int64_t>& dims, ElementType type) {
  Builder& b = ctx.b;
  Value u1 = uniform01(ctx, dims, type), u2 = uniform01(ctx, dims, type);
  Value one = b.splat(b.constant(1.0, type), dims);
  // 1 - u1 is in (0, 1]: the log is finite.
  Value radius = b.unary("sqrt", b.binary("multiply", b.splat(b.constant(-2.0, type), dims),
                                          b.unary("log", b.binary("subtract", one, u1))));
  Value angle = b.binary("multiply", b.splat(b.constant(2 * M_PI, type), dims), u2);
  return b.binary("multiply", radius, b.unary("cosine", angle));
}

Value running_sum_last(Builder& b, Value x, bool inclusive) {
  ElementType t = b.element_type(x);
  int64_t last = b.type(x).rank() - 1, terms = b.dims(x)[last];
  std::vector<int64_t> square = {terms, terms};
  Value rows = b.iota(TensorType{ElementType::kS64, square}, 0);
  Value cols = b.iota(TensorType{ElementType::kS64, square}, 1);
  Value ones = b.convert(b.compare(rows, cols, inclusive ? hlo::Compare::kLe : hlo::Compare::kLt), t);
  return b.dot_general(x, ones, {}, {}, {last}, {0}, t);
}

Value count_below_uniform(LoweringContext& ctx, Value pmf) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(pmf);
  auto wide = b.dims(pmf);
  std::vector<int64_t> rows(wide.begin(), wide.end() - 1), keep;
  for (size_t d = 0; d < rows.size(); ++d) keep.push_back(static_cast<int64_t>(d));
  Value cdf = running_sum_last(b, pmf, /*inclusive=*/true);
  Value u = b.broadcast_in_dim(uniform01(ctx, rows, t), wide, keep);
  Value below = b.convert(b.compare(cdf, u, hlo::Compare::kLt), t);
  return reduce(b, below, {static_cast<int64_t>(rows.size())}, ReduceKind::kSum);
}

namespace {

// The largest value of v's type below v (nextafter(v, -inf)) for finite v.
Value next_below(Builder& b, Value v) {
  ElementType t = b.element_type(v);
  auto dims = b.dims(v);
  ElementType bits_type = pjrt::byte_width(t) == 2   ? ElementType::kS16
                          : pjrt::byte_width(t) == 4 ? ElementType::kS32
                                                     : ElementType::kS64;
  Value bits = b.bitcast_convert(v, bits_type);
  Value one = b.splat(b.constant_int(1, bits_type), dims);
  Value zero = b.zeros(TensorType{t, dims});
  Value down = b.select(b.compare(v, zero, hlo::Compare::kGt), b.binary("subtract", bits, one),
                        b.binary("add", bits, one));
  // Below +0 is the smallest negative denormal: the sign bit and 1.
  int64_t smallest_negative = pjrt::byte_width(t) == 2   ? int64_t{-32767}
                              : pjrt::byte_width(t) == 4 ? int64_t{-2147483647}
                                                         : -std::numeric_limits<int64_t>::max();
  down = b.select(b.compare(v, zero, hlo::Compare::kEq),
                  b.splat(b.constant_int(smallest_negative, bits_type), dims), down);
  return b.bitcast_convert(down, t);
}

ElementType float_compute(ElementType t) {
  return t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

LoweringRegistrar registrar([] {
  // uniform_(self, from, to, generator)
  register_lowering("aten::uniform", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    ElementType t = b.element_type(self);
    TORCH_CHECK(hlo::is_float(t), "uniform_ expects a floating point tensor");
    auto dims = b.dims(self);
    ElementType c = float_compute(t);
    Value u = uniform01(ctx, dims, c);
    Value from = b.splat(ctx.scalar(1, c), dims), to = b.splat(ctx.scalar(2, c), dims);
    Value r = b.convert(b.binary("add", from, b.binary("multiply", u, b.binary("subtract", to, from))), t);
    // Rounding may reach `to`; the interval stays half-open, as in torch.
    Value to_t = b.convert(to, t);
    Value too_big = b.binary("and", b.compare(r, to_t, hlo::Compare::kGe),
                             b.compare(to_t, b.convert(from, t), hlo::Compare::kGt));
    return std::vector<Value>{b.select(too_big, next_below(b, to_t), r)};
  }, {"aten::uniform_", "aten::uniform.out"}, {}, {0}, /*random=*/true);

  // normal_(self, mean, std, generator): Box-Muller on two uniform draws.
  register_lowering("aten::normal_functional", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    ElementType t = b.element_type(self);
    TORCH_CHECK(hlo::is_float(t), "normal_ expects a floating point tensor");
    auto dims = b.dims(self);
    ElementType c = float_compute(t);
    Value z = standard_normal(ctx, dims, c);
    Value mean = b.splat(ctx.scalar(1, c), dims), std = b.splat(ctx.scalar(2, c), dims);
    return std::vector<Value>{b.convert(b.binary("add", mean, b.binary("multiply", std, z)), t)};
  }, {"aten::normal_"}, {}, {0}, /*random=*/true);

  // bernoulli_.float(self, p, generator)
  register_lowering("aten::bernoulli.float", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto dims = b.dims(self);
    Value u = uniform01(ctx, dims, ElementType::kF32);
    Value p = b.splat(ctx.scalar(1, ElementType::kF32), dims);
    return std::vector<Value>{b.convert(b.compare(u, p, hlo::Compare::kLt), b.element_type(self))};
  }, {"aten::bernoulli_.float", "aten::bernoulli.p"}, {}, {0}, /*random=*/true);
  // bernoulli(self, generator): self holds the probabilities.
  register_lowering("aten::bernoulli", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value p = ctx.tensor(0);
    auto dims = b.dims(p);
    Value u = uniform01(ctx, dims, ElementType::kF32);
    Value hit = b.compare(u, b.convert(p, ElementType::kF32), hlo::Compare::kLt);
    return std::vector<Value>{b.convert(hit, b.element_type(p))};
  }, {"aten::bernoulli.out"}, {}, {}, /*random=*/true);
  // bernoulli_.Tensor(self, p, generator)
  register_lowering("aten::bernoulli.Tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto dims = b.dims(self);
    Value u = uniform01(ctx, dims, ElementType::kF32);
    Value p = broadcast_to(b, b.convert(ctx.tensor(1), ElementType::kF32), dims);
    return std::vector<Value>{b.convert(b.compare(u, p, hlo::Compare::kLt), b.element_type(self))};
  }, {"aten::bernoulli_.Tensor"}, {}, {0}, /*random=*/true);

  // native_dropout(input, p, train) -> (output, mask)
  register_lowering("aten::native_dropout", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto dims = b.dims(x);
    ElementType t = b.element_type(x);
    bool train = ctx.is_none(2) || ctx.bool_arg(2);
    if (!train) return std::vector<Value>{x, b.splat(b.constant_bool(true), dims)};
    ElementType c = float_compute(t);
    Value p = b.splat(ctx.scalar(1, c), dims);
    Value keep = b.compare(uniform01(ctx, dims, c), p, hlo::Compare::kGe);
    // Scaled by 1 / (1 - p); p == 1 drops everything (no division by zero).
    Value one = b.splat(b.constant(1.0, c), dims);
    Value scale = b.select(b.compare(p, one, hlo::Compare::kLt), b.binary("divide", one, b.binary("subtract", one, p)),
                           b.zeros(TensorType{c, dims}));
    Value y = b.select(keep, b.binary("multiply", b.convert(x, c), scale), b.zeros(TensorType{c, dims}));
    return std::vector<Value>{b.convert(y, t), keep};
  }, {"aten::native_dropout.out"}, {}, {}, /*random=*/true);
  register_lowering("aten::native_dropout_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value g = ctx.tensor(0);
    ElementType t = b.element_type(g);
    Value mask = b.convert(ctx.tensor(1), ElementType::kPred);
    Value scale = b.splat(ctx.scalar(2, t), b.dims(g));
    return std::vector<Value>{b.select(mask, b.binary("multiply", g, scale), b.zeros(b.type(g)))};
  }, {"aten::native_dropout_backward.out"});

  // rrelu_with_noise(self, noise, lower, upper, training, generator): in
  // training each negative x is scaled by a uniform draw from [lower, upper],
  // recorded in noise (1 for the others); otherwise leaky_relu with the mean
  // slope, noise untouched.
  register_lowering("aten::rrelu_with_noise", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0), noise = ctx.tensor(1);
    TORCH_CHECK(hlo::is_float(b.element_type(x)), "rrelu_with_noise: expected a floating point tensor, got ",
                ctx.dtype(0));
    TORCH_CHECK(b.dims(noise) == b.dims(x) || !ctx.bool_arg(4), "rrelu_with_noise: noise of shape ",
                c10::IntArrayRef(b.dims(noise)), " does not match the input's ", c10::IntArrayRef(b.dims(x)));
    auto dims = b.dims(x);
    ElementType t = b.element_type(x), c = float_compute(t);
    Value xc = b.convert(x, c);
    Value lower = b.splat(ctx.scalar(2, c), dims), upper = b.splat(ctx.scalar(3, c), dims);
    Value negative = b.compare(xc, b.zeros(TensorType{c, dims}), hlo::Compare::kLe);
    Value slope;
    Value new_noise = noise;
    if (ctx.bool_arg(4)) {
      slope = b.binary("add", lower, b.binary("multiply", uniform01(ctx, dims, c), b.binary("subtract", upper, lower)));
      slope = b.select(negative, slope, b.splat(b.constant(1.0, c), dims));
      new_noise = b.convert(slope, b.element_type(noise));
    } else {
      slope = b.binary("multiply", b.binary("add", lower, upper), b.splat(b.constant(0.5, c), dims));
      negative = b.compare(xc, b.zeros(TensorType{c, dims}), hlo::Compare::kLt);
    }
    Value y = b.select(negative, b.binary("multiply", xc, slope), xc);
    return std::vector<Value>{b.convert(y, t), new_noise};
  }, {"aten::rrelu_with_noise.out", "aten::rrelu_with_noise_", "aten::rrelu_with_noise_functional"},
     {}, {}, /*random=*/true, /*mutated_args=*/{1});
  // rrelu_with_noise_backward(grad, self, noise, lower, upper, training, self_is_result)
  register_lowering("aten::rrelu_with_noise_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value g = ctx.tensor(0), x = ctx.tensor(1);
    auto dims = b.dims(g);
    ElementType t = b.element_type(g), c = float_compute(t);
    Value gc = b.convert(g, c);
    Value lower = b.splat(ctx.scalar(3, c), dims), upper = b.splat(ctx.scalar(4, c), dims);
    Value slope = b.binary("multiply", b.binary("add", lower, upper), b.splat(b.constant(0.5, c), dims));
    Value positive = b.compare(b.convert(x, c), b.zeros(TensorType{c, dims}), hlo::Compare::kGt);
    Value leaky = b.select(positive, gc, b.binary("multiply", gc, slope));
    if (!ctx.bool_arg(5)) return std::vector<Value>{b.convert(leaky, t)};
    // The recorded slopes (1 where x > 0), unless the interval is empty.
    Value noise = b.convert(broadcast_to(b, ctx.tensor(2), dims), c);
    Value drawn = b.compare(b.binary("subtract", upper, lower), b.splat(b.constant(1e-6, c), dims),
                            hlo::Compare::kGt);
    return std::vector<Value>{b.convert(b.select(drawn, b.binary("multiply", gc, noise), leaky), t)};
  }, {"aten::rrelu_with_noise_backward.out"});

  // random_.from(self, from, to, generator): integers in [from, to).
  auto random_range = [](LoweringContext& ctx, Value self, Value from, Value span) {
    Builder& b = ctx.b;
    auto dims = b.dims(self);
    Value bits = ctx.random_bits(TensorType{ElementType::kU64, dims});
    Value r = b.binary("remainder", bits, b.convert(span, ElementType::kU64));
    Value v = b.binary("add", b.convert(from, ElementType::kS64), b.convert(r, ElementType::kS64));
    return b.convert(v, b.element_type(self));
  };
  // The largest value random_() draws for a dtype, as torch's CPU kernel:
  // the dtype's max for integers (1 for bool), 2^digits for floats (every
  // integer up to it is exact).
  auto random_max = [](c10::ScalarType type) -> uint64_t {
    switch (type) {
      case at::kBool: return 1;
      case at::kByte: return 255;
      case at::kChar: return 127;
      case at::kShort: return 32767;
      case at::kInt: return 2147483647ULL;
      case at::kLong: return 9223372036854775807ULL;
      case at::kHalf: return 1ULL << 11;
      case at::kBFloat16: return 1ULL << 8;
      case at::kFloat: return 1ULL << 24;
      case at::kDouble: return 1ULL << 53;
      default: TORCH_CHECK(false, "random_ not implemented for '", type, "'");
    }
  };
  register_lowering("aten::random.from", [random_range, random_max](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto dims = b.dims(self);
    Value from = b.splat(ctx.scalar(1, ElementType::kS64), dims);
    if (ctx.is_none(2)) {
      // [from, the dtype's largest value]: the span as an unsigned count.
      uint64_t top = random_max(ctx.dtype(0));
      Value span = b.binary("subtract", b.splat(b.constant_int(static_cast<int64_t>(top), ElementType::kU64), dims),
                            b.convert(from, ElementType::kU64));
      span = b.binary("add", span, b.splat(b.constant_int(1, ElementType::kU64), dims));
      return std::vector<Value>{random_range(ctx, self, from, span)};
    }
    Value to = b.splat(ctx.scalar(2, ElementType::kS64), dims);
    return std::vector<Value>{random_range(ctx, self, from, b.binary("subtract", to, from))};
  }, {"aten::random_.from"}, {}, {0}, /*random=*/true);
  // random_(self): integers in [0, random_max].
  register_lowering("aten::random", [random_range, random_max](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto dims = b.dims(self);
    uint64_t span = random_max(ctx.dtype(0)) + 1;
    return std::vector<Value>{random_range(ctx, self, b.zeros(TensorType{ElementType::kS64, dims}),
                                           b.splat(b.constant_int(static_cast<int64_t>(span), ElementType::kU64), dims))};
  }, {"aten::random_"}, {}, {0}, /*random=*/true);
  register_lowering("aten::random.to", [random_range](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto dims = b.dims(self);
    return std::vector<Value>{random_range(ctx, self, b.zeros(TensorType{ElementType::kS64, dims}),
                                           b.splat(ctx.scalar(1, ElementType::kS64), dims))};
  }, {"aten::random_.to"}, {}, {0}, /*random=*/true);

  // multinomial(self, num_samples, replacement, generator) over the last dim.
  // Without replacement: the top num_samples of log(p) + Gumbel noise; with
  // replacement: inverse-CDF lookups of uniform draws.
  register_lowering("aten::multinomial", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value p = b.convert(ctx.tensor(0), ElementType::kF32);
    auto dims = b.dims(p);
    TORCH_CHECK(dims.size() == 1 || dims.size() == 2, "prob_dist must be 1 or 2 dim");
    int64_t k = ctx.int_arg(1);
    bool replacement = ctx.bool_arg(2);
    int64_t last = static_cast<int64_t>(dims.size()) - 1;
    int64_t classes = dims[last];
    TORCH_CHECK(k > 0, "cannot sample n_sample <= 0 samples");
    TORCH_CHECK(replacement || k <= classes, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    Value result;
    if (!replacement) {
      Value u = uniform01(ctx, dims, ElementType::kF32);
      Value tiny = b.splat(b.constant(1e-20, ElementType::kF32), dims);
      Value gumbel = b.unary("negate", b.unary("log", b.unary("negate", b.unary("log", b.binary("add", u, tiny)))));
      Value keys = b.binary("add", b.unary("log", p), gumbel);
      Value idx = b.iota(TensorType{ElementType::kS64, dims}, last);
      auto sorted = b.sort({keys, idx}, last, true, [](Builder& r, const std::vector<Value>& a) {
        return std::vector<Value>{r.compare(a[0], a[1], hlo::Compare::kGt)};
      });
      std::vector<int64_t> lo(dims.size(), 0), hi = dims, st(dims.size(), 1);
      hi[last] = k;
      result = b.slice(sorted[1], lo, hi, st);
    } else {
      // cdf [.., C], draws [.., k]: index = count(cdf < u * total).
      Value cdf = p;
      for (int64_t shift = 1; shift < classes; shift *= 2) {
        std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0), interior(dims.size(), 0);
        low[last] = shift;
        std::vector<int64_t> s0(dims.size(), 0), s1 = dims, st(dims.size(), 1);
        s1[last] = classes - shift;
        cdf = b.binary("add", cdf, b.pad(b.slice(cdf, s0, s1, st), b.constant(0.0, ElementType::kF32), low, high, interior));
      }
      std::vector<int64_t> draw_dims = dims;
      draw_dims[last] = k;
      Value total = reduce(b, p, {last}, ReduceKind::kSum);
      std::vector<int64_t> keep;
      for (int64_t d = 0; d < last; ++d) keep.push_back(d);
      Value u = b.binary("multiply", uniform01(ctx, draw_dims, ElementType::kF32),
                         b.broadcast_in_dim(total, draw_dims, keep));
      std::vector<int64_t> full = draw_dims;
      full.push_back(classes);
      std::vector<int64_t> umap, cmap;
      for (int64_t d = 0; d <= last; ++d) umap.push_back(d);
      for (int64_t d = 0; d < last; ++d) cmap.push_back(d);
      cmap.push_back(last + 1);
      Value below = b.compare(b.broadcast_in_dim(cdf, full, cmap), b.broadcast_in_dim(u, full, umap), hlo::Compare::kLe);
      result = reduce(b, b.convert(below, ElementType::kS64), {last + 1}, ReduceKind::kSum);
      result = b.binary("minimum", result, b.splat(b.constant_int(classes - 1, ElementType::kS64), draw_dims));
    }
    return std::vector<Value>{result};
  }, {"aten::multinomial.out"}, {}, {}, /*random=*/true);

  // randperm.generator_out(n, generator, out): sort random keys. Graphs
  // keep randperm(n, *, dtype, ...) itself (eager mode reaches the out
  // variant through torch's composite kernel): the same draw, in its dtype.
  auto randperm = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    int64_t n = ctx.int_arg(0);
    TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
    Value keys = ctx.random_bits(TensorType{ElementType::kU64, {n}});
    Value idx = b.iota(TensorType{ElementType::kS64, {n}}, 0);
    auto sorted = b.sort({keys, idx}, 0, true, [](Builder& r, const std::vector<Value>& a) {
      return std::vector<Value>{r.compare(a[0], a[1], hlo::Compare::kLt)};
    });
    return sorted[1];
  };
  register_lowering("aten::randperm.generator_out", [randperm](LoweringContext& ctx) {
    return std::vector<Value>{randperm(ctx)};
  }, {}, {}, {}, /*random=*/true);
  register_graph_lowering("aten::randperm", [randperm](LoweringContext& ctx) {
    Value perm = randperm(ctx);
    auto dtype = ctx.optional_dtype(1);
    if (dtype && *dtype != c10::kLong) perm = ctx.b.convert(perm, et(*dtype));
    return std::vector<Value>{perm};
  }, {}, /*random=*/true);
});

}  // namespace
}  // namespace torch_pjrt::ops
