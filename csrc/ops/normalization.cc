// Layer normalisation forward and backward, in f32 for bf16/f16 inputs.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

struct NormDims {
  std::vector<int64_t> input;
  std::vector<int64_t> reduced;  // the normalized trailing dims
  std::vector<int64_t> stats;    // shape of mean/rstd: leading dims, then 1s
  std::vector<int64_t> leading;  // the dims a weight gradient sums over
};

NormDims norm_dims(const std::vector<int64_t>& input, const std::vector<int64_t>& normalized) {
  int64_t axis = static_cast<int64_t>(input.size()) - static_cast<int64_t>(normalized.size());
  bool fits = axis >= 0;
  for (size_t i = 0; fits && i < normalized.size(); ++i) fits = input[axis + i] == normalized[i];
  TORCH_CHECK(fits, "Given normalized_shape=", c10::IntArrayRef(normalized),
              ", expected input with shape [*, ", c10::IntArrayRef(normalized),
              "], but got input of size", c10::IntArrayRef(input));
  NormDims d{input, {}, input, {}};
  for (int64_t i = axis; i < static_cast<int64_t>(input.size()); ++i) {
    d.reduced.push_back(i);
    d.stats[i] = 1;
  }
  for (int64_t i = 0; i < axis; ++i) d.leading.push_back(i);
  return d;
}

Value broadcast_param(Builder& b, Value p, const std::vector<int64_t>& dims) {
  return broadcast_to(b, p, dims);
}

// Per-channel statistics over every dim but 1 (N, C, *spatial).
std::vector<int64_t> all_but_channel(int64_t rank) {
  std::vector<int64_t> dims = {0};
  for (int64_t i = 2; i < rank; ++i) dims.push_back(i);
  return dims;
}

Value channel_broadcast(Builder& b, Value per_channel, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(per_channel, dims, {1});
}

LoweringRegistrar batch_norm_registrar([] {
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
  //   -> (out, save_mean, save_invstd); running stats updated in training.
  register_lowering("aten::native_batch_norm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    Value x = b.convert(ctx.tensor(0), acc);
    auto dims = b.dims(x);
    TORCH_CHECK(dims.size() >= 2, "batch_norm: expected at least 2D input (got ", dims.size(), "D input)");
    int64_t channels = dims[1];
    auto reduced = all_but_channel(static_cast<int64_t>(dims.size()));
    double n = 1;
    for (int64_t d : reduced) n *= static_cast<double>(dims[d]);
    bool training = ctx.bool_arg(5);
    Value eps = b.splat(ctx.scalar(7, acc), {channels});
    Value mean, var;
    bool have_running = !ctx.is_none(3) && !ctx.is_none(4);
    if (training) {
      TORCH_CHECK(n > 1, "Expected more than 1 value per channel when training, got input size ",
                  c10::IntArrayRef(dims));
      mean = b.binary("divide", reduce(b, x, reduced, ReduceKind::kSum), b.splat(b.constant(n, acc), {channels}));
      Value centered = b.binary("subtract", x, channel_broadcast(b, mean, dims));
      var = b.binary("divide", reduce(b, b.binary("multiply", centered, centered), reduced, ReduceKind::kSum),
                     b.splat(b.constant(n, acc), {channels}));
    } else {
      TORCH_CHECK(have_running, "running_mean and running_var must be defined in evaluation mode");
      mean = b.convert(ctx.tensor(3), acc);
      var = b.convert(ctx.tensor(4), acc);
    }
    Value invstd = b.unary("rsqrt", b.binary("add", var, eps));
    Value y = b.binary("multiply", b.binary("subtract", x, channel_broadcast(b, mean, dims)),
                       channel_broadcast(b, invstd, dims));
    if (!ctx.is_none(1)) y = b.binary("multiply", y, channel_broadcast(b, b.convert(ctx.tensor(1), acc), dims));
    if (!ctx.is_none(2)) y = b.binary("add", y, channel_broadcast(b, b.convert(ctx.tensor(2), acc), dims));
    std::vector<Value> out = {b.convert(y, et(type))};
    if (training) {
      out.push_back(mean);
      out.push_back(invstd);
    } else {
      out.push_back(b.zeros(TensorType{acc, {0}}));
      out.push_back(b.zeros(TensorType{acc, {0}}));
    }
    if (training && have_running) {
      // running = (1 - momentum) * running + momentum * stat, with the
      // unbiased variance, as torch does.
      Value m = b.splat(ctx.scalar(6, acc), {channels});
      Value keep = b.binary("subtract", b.splat(b.constant(1.0, acc), {channels}), m);
      Value unbiased = b.binary("multiply", var, b.splat(b.constant(n / std::max(1.0, n - 1), acc), {channels}));
      Value rm = b.binary("add", b.binary("multiply", keep, b.convert(ctx.tensor(3), acc)), b.binary("multiply", m, mean));
      Value rv = b.binary("add", b.binary("multiply", keep, b.convert(ctx.tensor(4), acc)), b.binary("multiply", m, unbiased));
      out.push_back(convert(b, rm, ctx.dtype(3)));
      out.push_back(convert(b, rv, ctx.dtype(4)));
    } else if (have_running) {
      out.push_back(ctx.tensor(3));  // unchanged
      out.push_back(ctx.tensor(4));
    }
    return out;
  }, {}, {}, {}, false, /*mutated_args=*/{3, 4});

  // The newer entry points are native_batch_norm with other signatures
  // (the saved statistics stay in float32 for low-precision input, as CUDA
  // and torch's own decompositions keep them).
  // _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps)
  register_lowering("aten::_native_batch_norm_legit", [](LoweringContext& ctx) {
    std::vector<LoweringArg> args;
    for (size_t i = 0; i < ctx.num_args(); ++i) args.push_back(ctx.arg(i));
    return delegate(ctx, "aten::native_batch_norm", args);
  }, {"aten::_native_batch_norm_legit.out"}, {}, {}, false, /*mutated_args=*/{3, 4});
  // _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
  register_lowering("aten::_native_batch_norm_legit.no_stats", [](LoweringContext& ctx) {
    std::vector<LoweringArg> args = {ctx.arg(0), ctx.arg(1), ctx.arg(2), static_arg(c10::IValue()),
                                     static_arg(c10::IValue()), ctx.arg(3), ctx.arg(4), ctx.arg(5)};
    auto out = delegate(ctx, "aten::native_batch_norm", args);
    out.resize(3);
    return out;
  }, {"aten::_native_batch_norm_legit.no_stats_out"});
  // _batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps)
  //   -> (out, save_mean, save_invstd, reserve): training, with an empty reserve.
  register_lowering("aten::_batch_norm_with_update", [](LoweringContext& ctx) {
    std::vector<LoweringArg> args = {ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3), ctx.arg(4),
                                     static_arg(true), ctx.arg(5), ctx.arg(6)};
    auto out = delegate(ctx, "aten::native_batch_norm", args);
    out.insert(out.begin() + 3, ctx.b.zeros(TensorType{ElementType::kU8, {0}}));
    return out;
  }, {"aten::_batch_norm_with_update.out"}, {}, {}, false, /*mutated_args=*/{3, 4});

  // native_batch_norm_backward(grad_out, input, weight, running_mean, running_var,
  //                            save_mean, save_invstd, train, eps, output_mask)
  register_lowering("aten::native_batch_norm_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    Value g = b.convert(ctx.tensor(0), acc), x = b.convert(ctx.tensor(1), acc);
    auto dims = b.dims(x);
    int64_t channels = dims[1];
    auto reduced = all_but_channel(static_cast<int64_t>(dims.size()));
    double n = 1;
    for (int64_t d : reduced) n *= static_cast<double>(dims[d]);
    bool train = ctx.bool_arg(7);
    Value mean, invstd;
    if (train) {
      mean = b.convert(ctx.tensor(5), acc);
      invstd = b.convert(ctx.tensor(6), acc);
    } else {
      mean = b.convert(ctx.tensor(3), acc);
      Value eps = b.splat(ctx.scalar(8, acc), {channels});
      invstd = b.unary("rsqrt", b.binary("add", b.convert(ctx.tensor(4), acc), eps));
    }
    Value w = ctx.is_none(2) ? b.splat(b.constant(1.0, acc), {channels}) : b.convert(ctx.tensor(2), acc);
    Value xhat = b.binary("multiply", b.binary("subtract", x, channel_broadcast(b, mean, dims)),
                          channel_broadcast(b, invstd, dims));
    Value sum_g = reduce(b, g, reduced, ReduceKind::kSum);
    Value sum_gx = reduce(b, b.binary("multiply", g, xhat), reduced, ReduceKind::kSum);
    Value scale = b.binary("multiply", w, invstd);
    Value dx;
    if (train) {
      Value inv_n = b.splat(b.constant(1.0 / n, acc), {channels});
      Value term = b.binary("subtract", g, channel_broadcast(b, b.binary("multiply", sum_g, inv_n), dims));
      term = b.binary("subtract", term, b.binary("multiply", xhat, channel_broadcast(b, b.binary("multiply", sum_gx, inv_n), dims)));
      dx = b.binary("multiply", term, channel_broadcast(b, scale, dims));
    } else {
      dx = b.binary("multiply", g, channel_broadcast(b, scale, dims));
    }
    c10::ScalarType wtype = ctx.is_none(2) ? type : ctx.dtype(2);
    return std::vector<Value>{b.convert(dx, et(type)), convert(b, sum_gx, wtype), convert(b, sum_g, wtype)};
  });
});

LoweringRegistrar group_norm_registrar([] {
  // native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd),
  // mean and rstd of shape [N, group] in the input's dtype, as on the CPU.
  // Without it, compiled graphs (diffusers' UNets) split at every GroupNorm.
  register_lowering("aten::native_group_norm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    int64_t n = ctx.int_arg(3), c = ctx.int_arg(4), hw = ctx.int_arg(5), groups = ctx.int_arg(6);
    auto in_dims = b.dims(ctx.tensor(0));
    TORCH_CHECK(groups > 0 && c % groups == 0, "native_group_norm: expected number of channels in input (", c,
                ") to be divisible by num_groups (", groups, "), input of size ", c10::IntArrayRef(in_dims));
    std::vector<int64_t> grouped = {n, groups, c / groups, hw};
    Value x = b.reshape(b.convert(ctx.tensor(0), acc), grouped);
    double count = static_cast<double>((c / groups) * hw);
    Value inv = b.splat(b.constant(1.0 / count, acc), {n, groups});
    Value mean = b.binary("multiply", reduce(b, x, {2, 3}, ReduceKind::kSum), inv);
    Value centered = b.binary("subtract", x, b.broadcast_in_dim(mean, grouped, {0, 1}));
    Value var = b.binary("multiply", reduce(b, b.binary("multiply", centered, centered), {2, 3}, ReduceKind::kSum), inv);
    Value rstd = b.unary("rsqrt", b.binary("add", var, b.splat(ctx.scalar(7, acc), {n, groups})));
    Value y = b.reshape(b.binary("multiply", centered, b.broadcast_in_dim(rstd, grouped, {0, 1})), {n, c, hw});
    if (!ctx.is_none(1)) y = b.binary("multiply", y, b.broadcast_in_dim(b.convert(ctx.tensor(1), acc), {n, c, hw}, {1}));
    if (!ctx.is_none(2)) y = b.binary("add", y, b.broadcast_in_dim(b.convert(ctx.tensor(2), acc), {n, c, hw}, {1}));
    return std::vector<Value>{b.convert(b.reshape(y, in_dims), et(type)), b.convert(mean, et(type)),
                              b.convert(rstd, et(type))};
  });

  // native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
  register_lowering("aten::native_group_norm_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    int64_t n = ctx.int_arg(5), c = ctx.int_arg(6), hw = ctx.int_arg(7), groups = ctx.int_arg(8);
    auto in_dims = b.dims(ctx.tensor(1));
    std::vector<int64_t> grouped = {n, groups, c / groups, hw};
    Value g = b.reshape(b.convert(ctx.tensor(0), acc), grouped);
    Value x = b.reshape(b.convert(ctx.tensor(1), acc), grouped);
    Value mean = b.broadcast_in_dim(b.reshape(b.convert(ctx.tensor(2), acc), {n, groups}), grouped, {0, 1});
    Value rstd = b.broadcast_in_dim(b.reshape(b.convert(ctx.tensor(3), acc), {n, groups}), grouped, {0, 1});
    Value xhat = b.binary("multiply", b.binary("subtract", x, mean), rstd);
    Value w = ctx.is_none(4) ? b.splat(b.constant(1.0, acc), {c}) : b.convert(ctx.tensor(4), acc);
    Value wg = b.broadcast_in_dim(b.reshape(w, {groups, c / groups}), grouped, {1, 2});
    Value gw = b.binary("multiply", g, wg);
    double count = static_cast<double>((c / groups) * hw);
    Value inv = b.splat(b.constant(1.0 / count, acc), grouped);
    Value mean_gw = expand_reduced(b, reduce(b, gw, {2, 3}, ReduceKind::kSum), grouped, {2, 3});
    Value mean_gwx = expand_reduced(b, reduce(b, b.binary("multiply", gw, xhat), {2, 3}, ReduceKind::kSum), grouped, {2, 3});
    Value dx = b.binary("multiply", rstd,
                        b.binary("subtract", b.binary("subtract", gw, b.binary("multiply", mean_gw, inv)),
                                 b.binary("multiply", xhat, b.binary("multiply", mean_gwx, inv))));
    Value dweight = b.reshape(reduce(b, b.binary("multiply", g, xhat), {0, 3}, ReduceKind::kSum), {c});
    Value dbias = b.reshape(reduce(b, g, {0, 3}, ReduceKind::kSum), {c});
    c10::ScalarType wtype = ctx.is_none(4) ? type : ctx.dtype(4);
    return std::vector<Value>{b.convert(b.reshape(dx, in_dims), et(type)), convert(b, dweight, wtype),
                              convert(b, dbias, wtype)};
  });
});

LoweringRegistrar registrar([] {
  register_lowering("aten::native_layer_norm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    c10::ScalarType compute = opmath_type(type);
    Value x = convert(b, ctx.tensor(0), compute);
    NormDims d = norm_dims(b.dims(x), ctx.int_list(1));
    double n = 1;
    for (int64_t i : d.reduced) n *= static_cast<double>(d.input[i]);
    ElementType t = et(compute);
    Value mean = b.binary("divide", reduce(b, x, d.reduced, ReduceKind::kSum),
                          b.splat(b.constant(n, t), [&] {
                            std::vector<int64_t> kept(d.input.begin(), d.input.begin() + d.leading.size());
                            return kept;
                          }()));
    Value centered = b.binary("subtract", x, expand_reduced(b, mean, d.input, d.reduced));
    Value var = reduce(b, b.binary("multiply", centered, centered), d.reduced, ReduceKind::kSum);
    var = b.binary("divide", var, b.splat(b.constant(n, t), b.dims(var)));
    Value eps = b.splat(ctx.scalar(4, t), b.dims(var));
    Value rstd = b.unary("rsqrt", b.binary("add", var, eps));
    Value y = b.binary("multiply", centered, expand_reduced(b, rstd, d.input, d.reduced));
    if (!ctx.is_none(2)) y = b.binary("multiply", y, broadcast_param(b, convert(b, ctx.tensor(2), compute), d.input));
    if (!ctx.is_none(3)) y = b.binary("add", y, broadcast_param(b, convert(b, ctx.tensor(3), compute), d.input));
    return std::vector<Value>{convert(b, y, type), b.reshape(mean, d.stats), b.reshape(rstd, d.stats)};
  }, {"aten::native_layer_norm.out"});

  // (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
  register_lowering("aten::native_layer_norm_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    c10::ScalarType compute = opmath_type(type);
    ElementType t = et(compute);
    Value g = convert(b, ctx.tensor(0), compute), x = convert(b, ctx.tensor(1), compute);
    NormDims d = norm_dims(b.dims(x), ctx.int_list(2));
    Value mean = broadcast_to(b, convert(b, ctx.tensor(3), compute), d.input);
    Value rstd = broadcast_to(b, convert(b, ctx.tensor(4), compute), d.input);
    Value xhat = b.binary("multiply", b.binary("subtract", x, mean), rstd);
    Value gw = g;
    if (!ctx.is_none(5)) gw = b.binary("multiply", g, broadcast_param(b, convert(b, ctx.tensor(5), compute), d.input));
    double n = 1;
    for (int64_t i : d.reduced) n *= static_cast<double>(d.input[i]);
    // dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
    Value sum_gw = expand_reduced(b, reduce(b, gw, d.reduced, ReduceKind::kSum), d.input, d.reduced);
    Value sum_gwx = expand_reduced(b, reduce(b, b.binary("multiply", gw, xhat), d.reduced, ReduceKind::kSum),
                                   d.input, d.reduced);
    Value inv_n = b.splat(b.constant(1.0 / n, t), d.input);
    Value dx = b.binary("multiply", rstd,
                        b.binary("subtract", b.binary("subtract", gw, b.binary("multiply", sum_gw, inv_n)),
                                 b.binary("multiply", xhat, b.binary("multiply", sum_gwx, inv_n))));
    std::vector<int64_t> param_dims(d.input.begin() + d.leading.size(), d.input.end());
    Value dweight = reduce(b, b.binary("multiply", g, xhat), d.leading, ReduceKind::kSum);
    Value dbias = reduce(b, g, d.leading, ReduceKind::kSum);
    c10::ScalarType wtype = ctx.is_none(5) ? type : ctx.dtype(5);
    c10::ScalarType btype = ctx.is_none(6) ? type : ctx.dtype(6);
    return std::vector<Value>{convert(b, dx, type), convert(b, b.reshape(dweight, param_dims), wtype),
                              convert(b, b.reshape(dbias, param_dims), btype)};
  }, {"aten::native_layer_norm_backward.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
