// The per-step pieces of nn.SyncBatchNorm: local statistics
// (batch_norm_stats), their merge across ranks (batch_norm_gather_stats and
// _with_counts, which also update the running statistics), the
// normalization (batch_norm_elemt) and the backward's reduction and
// elementwise parts (batch_norm_backward_reduce, _elemt); plus
// batch_norm_update_stats. torch has only CUDA kernels for all but the last,
// so SyncBatchNorm failed on tpu ("Could not run ... CPU backend").
//
// Channels are dim 1; statistics are reduced over every other dim. As on
// CUDA, statistics of half-precision input are float32, the running
// statistics move with the unbiased variance, and a rank's variance is
// recovered from its invstd as 1 / invstd^2 - eps.
#include <c10/util/Exception.h>

#include <utility>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

std::vector<int64_t> non_channel_dims(Builder& b, Value x, const char* op) {
  int64_t rank = b.type(x).rank();
  TORCH_CHECK(rank >= 2, op, ": expected an input with a channel dim (2-D or more), got ",
              c10::IntArrayRef(b.dims(x)));
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

double count_of(Builder& b, Value x) {
  double n = 1;
  auto dims = b.dims(x);
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d != 1) n *= static_cast<double>(dims[d]);
  }
  return n;
}

Value per_channel(Builder& b, Value v, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(v, dims, {1});
}

Value channel_vector(LoweringContext& ctx, size_t arg, int64_t channels, ElementType acc,
                     const char* op, const char* name) {
  Builder& b = ctx.b;
  Value v = ctx.tensor(arg);
  TORCH_CHECK(b.type(v).numel() == channels, op, ": ", name, " must have ", channels,
              " elements (one per channel), got ", c10::IntArrayRef(b.dims(v)));
  return b.reshape(b.convert(v, acc), {channels});
}

c10::ScalarType stats_type(c10::ScalarType input) {
  return input == at::kHalf || input == at::kBFloat16 ? at::kFloat : input;
}

// The per-channel mean and biased variance of x (already in its compute type).
std::pair<Value, Value> channel_moments(Builder& b, Value x, const char* op) {
  ElementType acc = b.element_type(x);
  auto reduced = non_channel_dims(b, x, op);
  int64_t channels = b.dims(x)[1];
  Value n = b.splat(b.constant(count_of(b, x), acc), {channels});
  Value mean = b.binary("divide", reduce(b, x, reduced, ReduceKind::kSum), n);
  Value centered = b.binary("subtract", x, per_channel(b, mean, b.dims(x)));
  Value var = b.binary("divide", reduce(b, b.binary("multiply", centered, centered), reduced, ReduceKind::kSum), n);
  return {mean, var};
}

Value splat_like(Builder& b, double v, Value like) {
  return b.splat(b.constant(v, b.element_type(like)), b.dims(like));
}

// Merges per-rank (mean, invstd, count) rows into the global mean and
// invstd, and updates the running statistics (appended to `out`).
std::vector<Value> gather_stats(LoweringContext& ctx, Value counts, const char* op) {
  Builder& b = ctx.b;
  Value means = ctx.tensor(1), invstds = ctx.tensor(2);
  TORCH_CHECK(b.type(means).rank() == 2 && b.dims(means) == b.dims(invstds), op,
              ": mean and invstd must be [world, channels] of one shape, got ",
              c10::IntArrayRef(b.dims(means)), " and ", c10::IntArrayRef(b.dims(invstds)));
  c10::ScalarType type = ctx.dtype(1);
  ElementType acc = et(opmath_type(type));
  int64_t world = b.dims(means)[0], channels = b.dims(means)[1];
  std::vector<int64_t> wc = {world, channels};
  means = b.convert(means, acc);
  Value eps = b.splat(ctx.scalar(6, acc), wc);
  Value inv = b.convert(invstds, acc);
  Value vars = b.binary("subtract", b.binary("divide", splat_like(b, 1.0, inv), b.binary("multiply", inv, inv)), eps);
  Value n_w = b.broadcast_in_dim(b.convert(counts, acc), wc, {0});
  Value total = reduce(b, b.convert(counts, acc), {0}, ReduceKind::kSum);  // []
  Value total_c = b.splat(total, {channels});
  Value mean = b.binary("divide", reduce(b, b.binary("multiply", n_w, means), {0}, ReduceKind::kSum), total_c);
  Value diff = b.binary("subtract", means, b.broadcast_in_dim(mean, wc, {1}));
  Value m2 = reduce(b, b.binary("multiply", n_w, b.binary("add", vars, b.binary("multiply", diff, diff))), {0},
                    ReduceKind::kSum);
  Value var = b.binary("divide", m2, total_c);
  Value invstd = b.unary("rsqrt", b.binary("add", var, b.splat(ctx.scalar(6, acc), {channels})));
  std::vector<Value> out = {convert(b, mean, type), convert(b, invstd, type)};
  if (!ctx.is_none(3) || !ctx.is_none(4)) {
    Value m = b.splat(ctx.scalar(5, acc), {channels});
    Value keep = b.binary("subtract", splat_like(b, 1.0, m), m);
    if (!ctx.is_none(3)) {
      Value rm = channel_vector(ctx, 3, channels, acc, op, "running_mean");
      out.push_back(convert(b, b.binary("add", b.binary("multiply", keep, rm), b.binary("multiply", m, mean)),
                            ctx.dtype(3)));
    }
    if (!ctx.is_none(4)) {
      Value rv = channel_vector(ctx, 4, channels, acc, op, "running_var");
      Value one = splat_like(b, 1.0, total_c);
      Value unbiased = b.binary("divide", b.binary("multiply", var, total_c),
                                b.binary("maximum", b.binary("subtract", total_c, one), one));
      out.push_back(convert(b, b.binary("add", b.binary("multiply", keep, rv), b.binary("multiply", m, unbiased)),
                            ctx.dtype(4)));
    }
  }
  return out;
}

LoweringRegistrar registrar([] {
  // batch_norm_stats(input, eps) -> (mean, invstd), biased variance.
  register_lowering("aten::batch_norm_stats", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = stats_type(ctx.dtype(0));
    ElementType acc = et(type);
    Value x = b.convert(ctx.tensor(0), acc);
    auto [mean, var] = channel_moments(b, x, "batch_norm_stats");
    int64_t channels = b.dims(x)[1];
    Value invstd = b.unary("rsqrt", b.binary("add", var, b.splat(ctx.scalar(1, acc), {channels})));
    return std::vector<Value>{mean, invstd};
  });

  // batch_norm_elemt(input, weight, bias, mean, invstd, eps)
  register_lowering("aten::batch_norm_elemt", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(0), acc);
    non_channel_dims(b, x, "batch_norm_elemt");
    int64_t channels = b.dims(x)[1];
    auto dims = b.dims(x);
    Value mean = channel_vector(ctx, 3, channels, acc, "batch_norm_elemt", "mean");
    Value invstd = channel_vector(ctx, 4, channels, acc, "batch_norm_elemt", "invstd");
    Value y = b.binary("multiply", b.binary("subtract", x, per_channel(b, mean, dims)), per_channel(b, invstd, dims));
    if (!ctx.is_none(1)) {
      y = b.binary("multiply", y, per_channel(b, channel_vector(ctx, 1, channels, acc, "batch_norm_elemt", "weight"), dims));
    }
    if (!ctx.is_none(2)) {
      y = b.binary("add", y, per_channel(b, channel_vector(ctx, 2, channels, acc, "batch_norm_elemt", "bias"), dims));
    }
    return std::vector<Value>{convert(b, y, type)};
  }, {"aten::batch_norm_elemt.out"});

  // batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean,
  // running_var, momentum, eps, counts) -> (mean, invstd); the running
  // statistics are updated in place.
  register_lowering("aten::batch_norm_gather_stats_with_counts", [](LoweringContext& ctx) {
    Value counts = ctx.tensor(7);
    TORCH_CHECK(ctx.b.type(counts).numel() == ctx.b.dims(ctx.tensor(1))[0],
                "batch_norm_gather_stats_with_counts: counts must have one entry per row of mean, got ",
                c10::IntArrayRef(ctx.b.dims(counts)), " for ", c10::IntArrayRef(ctx.b.dims(ctx.tensor(1))));
    return gather_stats(ctx, ctx.b.reshape(counts, {ctx.b.type(counts).numel()}),
                        "batch_norm_gather_stats_with_counts");
  }, {}, {}, {}, false, /*mutated_args=*/{3, 4});
  // batch_norm_gather_stats(input, mean, invstd, running_mean, running_var,
  // momentum, eps, count): every rank with `count` elements.
  register_lowering("aten::batch_norm_gather_stats", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    int64_t world = b.dims(ctx.tensor(1))[0];
    Value counts = b.splat(ctx.scalar(7, ElementType::kF32), {world});
    return gather_stats(ctx, counts, "batch_norm_gather_stats");
  }, {}, {}, {}, false, /*mutated_args=*/{3, 4});

  // batch_norm_backward_reduce(grad_out, input, mean, invstd, weight,
  // input_g, weight_g, bias_g) -> (sum_dy, sum_dy_xmu, grad_weight,
  // grad_bias). All four are computed; CUDA leaves the unrequested ones
  // undefined.
  register_lowering("aten::batch_norm_backward_reduce", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType stats = ctx.dtype(2);
    ElementType acc = et(opmath_type(stats_type(ctx.dtype(1))));
    Value dy = b.convert(ctx.tensor(0), acc), x = b.convert(ctx.tensor(1), acc);
    auto reduced = non_channel_dims(b, x, "batch_norm_backward_reduce");
    TORCH_CHECK(b.dims(dy) == b.dims(x), "batch_norm_backward_reduce: grad_out ", c10::IntArrayRef(b.dims(dy)),
                " does not match the input ", c10::IntArrayRef(b.dims(x)));
    int64_t channels = b.dims(x)[1];
    auto dims = b.dims(x);
    Value mean = channel_vector(ctx, 2, channels, acc, "batch_norm_backward_reduce", "mean");
    Value invstd = channel_vector(ctx, 3, channels, acc, "batch_norm_backward_reduce", "invstd");
    Value sum_dy = reduce(b, dy, reduced, ReduceKind::kSum);
    Value xmu = b.binary("subtract", x, per_channel(b, mean, dims));
    Value sum_dy_xmu = reduce(b, b.binary("multiply", dy, xmu), reduced, ReduceKind::kSum);
    c10::ScalarType param = ctx.is_none(4) ? stats : ctx.dtype(4);
    return std::vector<Value>{convert(b, sum_dy, stats), convert(b, sum_dy_xmu, stats),
                              convert(b, b.binary("multiply", sum_dy_xmu, invstd), param),
                              convert(b, sum_dy, param)};
  });

  // batch_norm_backward_elemt(grad_out, input, mean, invstd, weight,
  // sum_dy, sum_dy_xmu, count): the input's gradient from the reduced sums
  // of every rank (count: the ranks' element counts).
  register_lowering("aten::batch_norm_backward_elemt", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    Value dy = b.convert(ctx.tensor(0), acc), x = b.convert(ctx.tensor(1), acc);
    non_channel_dims(b, x, "batch_norm_backward_elemt");
    int64_t channels = b.dims(x)[1];
    auto dims = b.dims(x);
    const char* op = "batch_norm_backward_elemt";
    Value mean = channel_vector(ctx, 2, channels, acc, op, "mean");
    Value invstd = channel_vector(ctx, 3, channels, acc, op, "invstd");
    Value sum_dy = channel_vector(ctx, 5, channels, acc, op, "sum_dy");
    Value sum_dy_xmu = channel_vector(ctx, 6, channels, acc, op, "sum_dy_xmu");
    Value total = b.splat(reduce(b, b.convert(ctx.tensor(7), acc), all_dims(b.type(ctx.tensor(7)).rank()),
                                 ReduceKind::kSum), {channels});
    Value grad_mean = b.binary("divide", sum_dy, total);
    Value proj = b.binary("multiply", b.binary("divide", sum_dy_xmu, total), b.binary("multiply", invstd, invstd));
    Value scale = invstd;
    if (!ctx.is_none(4)) scale = b.binary("multiply", scale, channel_vector(ctx, 4, channels, acc, op, "weight"));
    Value xmu = b.binary("subtract", x, per_channel(b, mean, dims));
    Value g = b.binary("subtract", b.binary("subtract", dy, per_channel(b, grad_mean, dims)),
                       b.binary("multiply", xmu, per_channel(b, proj, dims)));
    return std::vector<Value>{convert(b, b.binary("multiply", g, per_channel(b, scale, dims)), type)};
  });

  // batch_norm_update_stats(input, running_mean, running_var, momentum) ->
  // (mean, biased var); the running statistics move in place (unbiased
  // variance), as the CPU kernel does.
  register_lowering("aten::batch_norm_update_stats", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = stats_type(ctx.dtype(0));
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(0), acc);
    auto [mean, var] = channel_moments(b, x, "batch_norm_update_stats");
    int64_t channels = b.dims(x)[1];
    double count = count_of(b, x);
    std::vector<Value> out = {convert(b, mean, type), convert(b, var, type)};
    Value m = b.splat(ctx.scalar(3, acc), {channels});
    Value keep = b.binary("subtract", splat_like(b, 1.0, m), m);
    if (!ctx.is_none(1)) {
      Value rm = channel_vector(ctx, 1, channels, acc, "batch_norm_update_stats", "running_mean");
      out.push_back(convert(b, b.binary("add", b.binary("multiply", keep, rm), b.binary("multiply", m, mean)),
                            ctx.dtype(1)));
    }
    if (!ctx.is_none(2)) {
      Value rv = channel_vector(ctx, 2, channels, acc, "batch_norm_update_stats", "running_var");
      Value unbiased = b.binary("multiply", var, b.splat(b.constant(count / std::max(1.0, count - 1), acc), {channels}));
      out.push_back(convert(b, b.binary("add", b.binary("multiply", keep, rv), b.binary("multiply", m, unbiased)),
                            ctx.dtype(2)));
    }
    return out;
  }, {}, {}, {}, false, /*mutated_args=*/{1, 2});
});

}  // namespace
}  // namespace torch_pjrt::ops
