// Losses the nn modules reach: mse_loss and nll_loss (cross_entropy is
// log_softmax + nll_loss in torch), with their backward ops.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

Value apply_reduction(Builder& b, Value x, int64_t reduction) {
  if (reduction == kNone) return x;
  std::vector<int64_t> all;
  for (int64_t i = 0; i < b.type(x).rank(); ++i) all.push_back(i);
  Value s = reduce(b, x, all, ReduceKind::kSum);
  if (reduction == kSum) return s;
  double n = static_cast<double>(b.type(x).numel());
  return b.binary("divide", s, b.constant(n, b.element_type(s)));
}

// One-hot mask of the target class along dim 1 (or dim 0 for 1-D input).
Value class_mask(Builder& b, Value target, const std::vector<int64_t>& input_dims, int64_t class_dim) {
  TensorType idx{ElementType::kS64, input_dims};
  Value classes = b.iota(idx, class_dim);
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(input_dims.size()); ++i) {
    if (i != class_dim) mapping.push_back(i);
  }
  Value t = b.broadcast_in_dim(b.convert(target, ElementType::kS64), input_dims, mapping);
  return b.compare(classes, t, hlo::Compare::kEq);
}

struct NllParts {
  Value weights;  // per-sample weight, 0 for ignored targets (target shape)
  int64_t class_dim;
};

NllParts nll_weights(LoweringContext& ctx, Value input, Value target, int64_t ignore_index) {
  Builder& b = ctx.b;
  auto in = b.dims(input);
  TORCH_CHECK(!in.empty(), "input tensor should be 1D or 2D");
  // (C), (N, C) or (N, C, d1, ...): classes along dim 1 except for 1-D input.
  int64_t class_dim = in.size() == 1 ? 0 : 1;
  int64_t classes = in[class_dim];
  ElementType t = b.element_type(input);
  Value tgt = b.convert(target, ElementType::kS64);
  auto tdims = b.dims(tgt);
  std::vector<int64_t> expected = in;
  expected.erase(expected.begin() + class_dim);
  TORCH_CHECK(tdims == expected, in.size() <= 2 ? "Expected input batch_size (" : "expected target of size ",
              in.size() <= 2 ? std::to_string(in.size() == 1 ? 1 : in[0]) : "",
              in.size() <= 2 ? ") to match target batch_size (" : "",
              in.size() <= 2 ? std::to_string(tdims.empty() ? 1 : tdims[0]) + ")." : "",
              in.size() > 2 ? c10::str(c10::IntArrayRef(expected), ", got ", c10::IntArrayRef(tdims)) : "");
  Value keep = b.compare(tgt, b.splat(b.constant_int(ignore_index, ElementType::kS64), tdims),
                         hlo::Compare::kNe);
  Value w;
  if (!ctx.is_none(2)) {
    Value weight = convert(ctx.b, ctx.tensor(2), ctx.dtype(0));
    TORCH_CHECK(b.type(weight).numel() == classes, "weight tensor should be defined either for all ",
                classes, " classes or no classes but got weight tensor of shape: [",
                b.type(weight).numel(), "]");
    // weight[target], with ignored targets mapped to class 0 then zeroed.
    Value safe = b.select(keep, tgt, b.zeros(TensorType{ElementType::kS64, tdims}));
    Value idx = b.reshape(safe, [&] { auto d = tdims; d.push_back(1); return d; }());
    hlo::Builder::GatherDims g{{}, {0}, {0}, static_cast<int64_t>(tdims.size())};
    w = b.gather(weight, idx, g, {1}, tdims);
  } else {
    w = b.splat(b.constant(1.0, t), tdims);
  }
  w = b.select(keep, w, b.zeros(TensorType{t, tdims}));
  // A target outside [0, classes) poisons its loss with NaN rather than
  // dropping out silently. (CPU raises; raising here would need a host sync.)
  Value in_range = b.binary(
      "and", b.compare(tgt, b.zeros(TensorType{ElementType::kS64, tdims}), hlo::Compare::kGe),
      b.compare(tgt, b.splat(b.constant_int(classes, ElementType::kS64), tdims), hlo::Compare::kLt));
  w = b.select(b.binary("or", in_range, b.unary("not", keep)), w,
               b.splat(b.constant(NAN, t), tdims));
  return {w, class_dim};
}

LoweringRegistrar registrar([] {
  register_lowering("aten::mse_loss", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, opmath_type(type));
    Value d = b.binary("subtract", xs[0], xs[1]);
    return std::vector<Value>{convert(b, apply_reduction(b, b.binary("multiply", d, d), ctx.int_arg(2)), type)};
  }, {"aten::mse_loss.out"});
  register_lowering("aten::mse_loss_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(1), ctx.tensor(2)}, compute);
    auto dims = b.dims(xs[0]);
    Value grad = broadcast_to(b, convert(b, ctx.tensor(0), compute), dims);
    double scale = ctx.int_arg(3) == kMean ? 2.0 / static_cast<double>(b.type(xs[0]).numel()) : 2.0;
    Value g = b.binary("multiply", b.binary("multiply", grad, b.binary("subtract", xs[0], xs[1])),
                       b.splat(b.constant(scale, et(compute)), dims));
    return std::vector<Value>{convert(b, g, type)};
  }, {"aten::mse_loss_backward.grad_input"});

  // nll_loss_forward(input, target, weight, reduction, ignore_index) -> (output, total_weight)
  auto nll_forward = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value input = ctx.tensor(0);
    int64_t reduction = ctx.int_arg(3);
    NllParts parts = nll_weights(ctx, input, ctx.tensor(1), ctx.int_arg(4));
    auto in = b.dims(input);
    ElementType t = b.element_type(input);
    // Picked log-probability per sample: sum over classes of input * onehot.
    Value mask = class_mask(b, ctx.tensor(1), in, parts.class_dim);
    Value picked = reduce(b, b.select(mask, input, b.zeros(TensorType{t, in})), {parts.class_dim},
                          ReduceKind::kSum);
    Value losses = b.unary("negate", b.binary("multiply", picked, parts.weights));
    std::vector<int64_t> all;
    for (int64_t i = 0; i < b.type(losses).rank(); ++i) all.push_back(i);
    Value total_weight = reduce(b, parts.weights, all, ReduceKind::kSum);
    Value out;
    if (reduction == kNone) {
      out = losses;
    } else {
      out = reduce(b, losses, all, ReduceKind::kSum);
      if (reduction == kMean) out = b.binary("divide", out, total_weight);
    }
    return std::vector<Value>{out, total_weight};
  };
  register_lowering("aten::nll_loss_forward", nll_forward, {"aten::nll_loss_forward.output"});
  register_lowering("aten::nll_loss2d_forward", nll_forward, {"aten::nll_loss2d_forward.output"});

  // nll_loss_backward(grad, input, target, weight, reduction, ignore_index, total_weight)
  auto nll_backward = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value grad = ctx.tensor(0), input = ctx.tensor(1);
    int64_t reduction = ctx.int_arg(4);
    // Shift argument positions: nll_weights reads the weight at position 2.
    NllParts parts = [&] {
      std::vector<LoweringArg> args = {ctx.arg(1), ctx.arg(2), ctx.arg(3)};
      LoweringContext sub(b, ctx.op(), args);
      return nll_weights(sub, input, ctx.tensor(2), ctx.int_arg(5));
    }();
    auto in = b.dims(input);
    ElementType t = b.element_type(input);
    Value per_sample = b.unary("negate", parts.weights);
    auto tdims = b.dims(per_sample);
    if (reduction == kNone) {
      per_sample = b.binary("multiply", per_sample, b.reshape(grad, tdims));
    } else {
      Value g = b.reshape(grad, {});
      if (reduction == kMean) g = b.binary("divide", g, b.reshape(ctx.tensor(6), {}));
      per_sample = b.binary("multiply", per_sample, b.splat(g, tdims));
    }
    std::vector<int64_t> mapping;
    for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) {
      if (i != parts.class_dim) mapping.push_back(i);
    }
    Value spread = b.broadcast_in_dim(per_sample, in, mapping);
    Value mask = class_mask(b, ctx.tensor(2), in, parts.class_dim);
    return std::vector<Value>{b.select(mask, spread, b.zeros(TensorType{t, in}))};
  };
  register_lowering("aten::nll_loss_backward", nll_backward, {"aten::nll_loss_backward.grad_input"});
  register_lowering("aten::nll_loss2d_backward", nll_backward,
                    {"aten::nll_loss2d_backward.grad_input"});
});

}  // namespace
}  // namespace torch_pjrt::ops
