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
  c10::ScalarType target_type = ctx.dtype(1);
  TORCH_CHECK(target_type == at::kLong || target_type == at::kByte,
              "expected target dtype to be Long or Byte, but got ", target_type);
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
  // A target outside [0, classes) that is not ignore_index raises CPU's
  // IndexError at the next host wait (a deferred check: no sync per op), and
  // until then poisons its loss with NaN rather than dropping out silently.
  Value in_range = b.binary(
      "and", b.compare(tgt, b.zeros(TensorType{ElementType::kS64, tdims}), hlo::Compare::kGe),
      b.compare(tgt, b.splat(b.constant_int(classes, ElementType::kS64), tdims), hlo::Compare::kLt));
  Value valid = b.binary("or", in_range, b.unary("not", keep));
  std::vector<int64_t> all_dims;
  for (int64_t i = 0; i < static_cast<int64_t>(tdims.size()); ++i) all_dims.push_back(i);
  ctx.require(reduce(b, valid, all_dims, ReduceKind::kAnd),
              c10::str("Target is out of bounds (a target outside [0, ", classes,
                       ") that is not ignore_index=", ignore_index, ")."));
  w = b.select(valid, w, b.splat(b.constant(NAN, t), tdims));
  return {w, class_dim};
}

Value splat_of(Builder& b, double v, Value like) {
  return b.splat(b.constant(v, b.element_type(like)), b.dims(like));
}

LoweringRegistrar pointwise_registrar([] {
  // smooth_l1_loss(self, target, reduction, beta): beta is static (it picks
  // the formula when 0).
  register_lowering("aten::smooth_l1_loss", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, opmath_type(type));
    double beta = ctx.double_arg(3);
    Value d = b.unary("abs", b.binary("subtract", xs[0], xs[1]));
    Value loss = d;
    if (beta > 0) {
      Value quad = b.binary("divide", b.binary("multiply", splat_of(b, 0.5, d), b.binary("multiply", d, d)), splat_of(b, beta, d));
      loss = b.select(b.compare(d, splat_of(b, beta, d), hlo::Compare::kLt), quad,
                      b.binary("subtract", d, splat_of(b, 0.5 * beta, d)));
    }
    return std::vector<Value>{convert(b, apply_reduction(b, loss, ctx.int_arg(2)), type)};
  }, {"aten::smooth_l1_loss.out"}, /*static_scalars=*/{3});
  register_lowering("aten::smooth_l1_loss_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(1), ctx.tensor(2)}, compute);
    auto dims = b.dims(xs[0]);
    double beta = ctx.double_arg(4);
    Value diff = b.binary("subtract", xs[0], xs[1]);
    Value sign = b.unary("sign", diff);
    Value d = sign;
    if (beta > 0) {
      d = b.select(b.compare(b.unary("abs", diff), splat_of(b, beta, diff), hlo::Compare::kLt),
                   b.binary("divide", diff, splat_of(b, beta, diff)), sign);
    }
    Value grad = broadcast_to(b, convert(b, ctx.tensor(0), compute), dims);
    Value r = b.binary("multiply", grad, d);
    if (ctx.int_arg(3) == kMean) r = b.binary("divide", r, splat_of(b, static_cast<double>(b.type(r).numel()), r));
    return std::vector<Value>{convert(b, r, type)};
  }, {"aten::smooth_l1_loss_backward.grad_input"}, /*static_scalars=*/{4});

  // binary_cross_entropy(self, target, weight, reduction); logs clamped at -100 as torch does.
  register_lowering("aten::binary_cross_entropy", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, compute);
    Value p = xs[0], t = xs[1];
    Value floor = splat_of(b, -100.0, p);
    Value log_p = b.binary("maximum", b.unary("log", p), floor);
    Value log_q = b.binary("maximum", b.unary("log", b.binary("subtract", splat_of(b, 1.0, p), p)), floor);
    Value loss = b.unary("negate", b.binary("add", b.binary("multiply", t, log_p),
                                            b.binary("multiply", b.binary("subtract", splat_of(b, 1.0, t), t), log_q)));
    if (!ctx.is_none(2)) loss = b.binary("multiply", loss, broadcast_to(b, convert(b, ctx.tensor(2), compute), b.dims(loss)));
    return std::vector<Value>{convert(b, apply_reduction(b, loss, ctx.int_arg(3)), type)};
  }, {"aten::binary_cross_entropy.out"});
  // binary_cross_entropy_backward(grad, self, target, weight, reduction)
  register_lowering("aten::binary_cross_entropy_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    c10::ScalarType compute = opmath_type(type);
    auto xs = promote_and_broadcast(b, {ctx.tensor(1), ctx.tensor(2)}, compute);
    Value p = xs[0], t = xs[1];
    auto dims = b.dims(p);
    // (p - t) / max((1 - p) * p, eps), eps = 1e-12 as in torch.
    Value denom = b.binary("maximum", b.binary("multiply", b.binary("subtract", splat_of(b, 1.0, p), p), p),
                           splat_of(b, 1e-12, p));
    Value d = b.binary("divide", b.binary("subtract", p, t), denom);
    Value grad = broadcast_to(b, convert(b, ctx.tensor(0), compute), dims);
    d = b.binary("multiply", grad, d);
    if (!ctx.is_none(3)) d = b.binary("multiply", d, broadcast_to(b, convert(b, ctx.tensor(3), compute), dims));
    if (ctx.int_arg(4) == kMean) d = b.binary("divide", d, splat_of(b, static_cast<double>(b.type(d).numel()), d));
    return std::vector<Value>{convert(b, d, type)};
  }, {"aten::binary_cross_entropy_backward.grad_input"});

  // log_sigmoid_forward(self) -> (output, buffer); backward(grad, self, buffer)
  register_lowering("aten::log_sigmoid_forward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    Value x = convert(b, ctx.tensor(0), opmath_type(type));
    // -softplus(-x) = min(x, 0) - log1p(exp(-|x|))
    Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
    Value r = b.binary("subtract", b.binary("minimum", x, splat_of(b, 0, x)), b.unary("log_plus_one", z));
    // The buffer is not read by the backward here. Eager returns it empty,
    // as CUDA does; a compiled graph returns what the meta function (and
    // CPU) says: exp(-|x|), shaped as x.
    Value buffer = ctx.meta_layout() ? convert(b, z, type) : b.zeros(TensorType{et(type), {0}});
    return std::vector<Value>{convert(b, r, type), buffer};
  }, {"aten::log_sigmoid_forward.output"});
  register_lowering("aten::log_sigmoid_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    c10::ScalarType compute = opmath_type(type);
    Value g = convert(b, ctx.tensor(0), compute), x = convert(b, ctx.tensor(1), compute);
    // d/dx log(sigmoid(x)) = 1 - sigmoid(x) = sigmoid(-x)
    return std::vector<Value>{convert(b, b.binary("multiply", g, b.unary("logistic", b.unary("negate", x))), type)};
  }, {"aten::log_sigmoid_backward.grad_input"});

  // xlogy(self, other) = 0 where self == 0 (unless other is NaN)
  auto xlogy = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = float_type(result_type(ctx, {0, 1}));
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, opmath_type(type));
    Value r = b.binary("multiply", xs[0], b.unary("log", xs[1]));
    Value zero = b.compare(xs[0], splat_of(b, 0, xs[0]), hlo::Compare::kEq);
    Value y_nan = b.compare(xs[1], xs[1], hlo::Compare::kNe);
    r = b.select(b.binary("and", zero, b.unary("not", y_nan)), splat_of(b, 0, r), r);
    return std::vector<Value>{convert(b, r, type)};
  };
  register_lowering("aten::xlogy.Tensor", xlogy, {"aten::xlogy_.Tensor", "aten::xlogy.OutTensor"});
  register_lowering("aten::xlogy.Scalar_Other", xlogy, {"aten::xlogy_.Scalar_Other", "aten::xlogy.OutScalar_Other"});
});

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
