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
