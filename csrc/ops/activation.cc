// Activations and their backward ops: relu, gelu (both approximations),
// silu, mish, softplus, hardtanh, leaky_relu, elu, and the backward forms
// autograd calls for tanh and sigmoid.
#include <c10/util/Exception.h>

#include <cmath>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value splat_like(Builder& b, double v, Value like) {
  return b.splat(b.constant(v, b.element_type(like)), b.dims(like));
}

// Runs `fn` on the arguments' values in opmath precision (f32 for bf16/f16)
// and rounds the result back to the first tensor's dtype.
using MathFn = std::function<Value(Builder&, const std::vector<Value>&, LoweringContext&)>;

void activation(const std::string& op, std::vector<size_t> tensors, MathFn fn,
                std::vector<std::string> aliases = {}) {
  register_lowering(op, [tensors, fn](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(tensors[0]);
    c10::ScalarType compute = opmath_type(type);
    std::vector<Value> xs;
    for (size_t i : tensors) xs.push_back(convert(b, ctx.tensor(i), compute));
    return std::vector<Value>{convert(b, fn(b, xs, ctx), type)};
  }, std::move(aliases));
}

Value relu(Builder& b, Value x) { return b.binary("maximum", x, splat_like(b, 0, x)); }

Value gelu(Builder& b, Value x, bool tanh_approx) {
  Value half = splat_like(b, 0.5, x), one = splat_like(b, 1.0, x);
  if (tanh_approx) {
    Value inner = b.binary("multiply", splat_like(b, std::sqrt(2.0 / M_PI), x),
                           b.binary("add", x, b.binary("multiply", splat_like(b, 0.044715, x),
                                                       b.binary("multiply", x, b.binary("multiply", x, x)))));
    return b.binary("multiply", b.binary("multiply", half, x), b.binary("add", one, b.unary("tanh", inner)));
  }
  Value erf = b.unary("chlo.erf", b.binary("multiply", x, splat_like(b, M_SQRT1_2, x)));
  return b.binary("multiply", b.binary("multiply", half, x), b.binary("add", one, erf));
}

Value gelu_backward(Builder& b, Value grad, Value x, bool tanh_approx) {
  Value half = splat_like(b, 0.5, x), one = splat_like(b, 1.0, x);
  if (tanh_approx) {
    double k = std::sqrt(2.0 / M_PI);
    Value x2 = b.binary("multiply", x, x);
    Value inner = b.binary("multiply", splat_like(b, k, x),
                           b.binary("add", x, b.binary("multiply", splat_like(b, 0.044715, x),
                                                       b.binary("multiply", x2, x))));
    Value t = b.unary("tanh", inner);
    Value dinner = b.binary("multiply", splat_like(b, k, x),
                            b.binary("add", one, b.binary("multiply", splat_like(b, 3 * 0.044715, x), x2)));
    Value sech2 = b.binary("subtract", one, b.binary("multiply", t, t));
    Value d = b.binary("add", b.binary("multiply", half, b.binary("add", one, t)),
                       b.binary("multiply", b.binary("multiply", half, x), b.binary("multiply", sech2, dinner)));
    return b.binary("multiply", grad, d);
  }
  Value cdf = b.binary("multiply", half,
                       b.binary("add", one, b.unary("chlo.erf", b.binary("multiply", x, splat_like(b, M_SQRT1_2, x)))));
  Value pdf = b.binary("multiply", splat_like(b, 1.0 / std::sqrt(2.0 * M_PI), x),
                       b.unary("exponential", b.binary("multiply", splat_like(b, -0.5, x), b.binary("multiply", x, x))));
  return b.binary("multiply", grad, b.binary("add", cdf, b.binary("multiply", x, pdf)));
}

bool tanh_approximation(LoweringContext& ctx, size_t arg) {
  if (ctx.is_none(arg)) return false;
  const std::string& mode = ctx.ivalue(arg).toStringRef();
  TORCH_CHECK(mode == "none" || mode == "tanh", "approximate argument must be either none or tanh.");
  return mode == "tanh";
}

Value softplus(Builder& b, Value x, Value beta, Value threshold) {
  Value bx = b.binary("multiply", x, beta);
  Value soft = b.binary("divide", b.unary("log_plus_one", b.unary("exponential", bx)), beta);
  return b.select(b.compare(bx, threshold, hlo::Compare::kGt), x, soft);
}

LoweringRegistrar registrar([] {
  activation("aten::relu", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    return relu(b, x[0]);
  }, {"aten::relu_"});
  activation("aten::threshold_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                    LoweringContext& ctx) {
    auto shape = broadcast_shape(b.dims(x[0]), b.dims(x[1]));
    Value grad = broadcast_to(b, x[0], shape), self = broadcast_to(b, x[1], shape);
    Value threshold = b.splat(ctx.scalar(2, b.element_type(self)), shape);
    return b.select(b.compare(self, threshold, hlo::Compare::kLe),
                    b.zeros(TensorType{b.element_type(grad), shape}), grad);
  }, {"aten::threshold_backward.grad_input"});
  activation("aten::gelu", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext& ctx) {
    return gelu(b, x[0], tanh_approximation(ctx, 1));
  }, {"aten::gelu_", "aten::gelu.out"});
  activation("aten::gelu_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                               LoweringContext& ctx) {
    return gelu_backward(b, x[0], x[1], tanh_approximation(ctx, 2));
  }, {"aten::gelu_backward.grad_input"});
  activation("aten::silu", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    return b.binary("multiply", x[0], b.unary("logistic", x[0]));
  }, {"aten::silu_", "aten::silu.out"});
  activation("aten::silu_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                               LoweringContext&) {
    Value s = b.unary("logistic", x[1]);
    Value one = splat_like(b, 1.0, s);
    Value d = b.binary("multiply", s, b.binary("add", one, b.binary("multiply", x[1],
                                                                    b.binary("subtract", one, s))));
    return b.binary("multiply", x[0], d);
  }, {"aten::silu_backward.grad_input"});
  activation("aten::mish", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    Value sp = softplus(b, x[0], splat_like(b, 1.0, x[0]), splat_like(b, 20.0, x[0]));
    return b.binary("multiply", x[0], b.unary("tanh", sp));
  }, {"aten::mish_", "aten::mish.out"});
  activation("aten::softplus", {0}, [](Builder& b, const std::vector<Value>& x,
                                       LoweringContext& ctx) {
    ElementType t = b.element_type(x[0]);
    return softplus(b, x[0], b.splat(ctx.scalar(1, t), b.dims(x[0])),
                    b.splat(ctx.scalar(2, t), b.dims(x[0])));
  }, {"aten::softplus.out"});
  // softplus_backward(grad, self, beta, threshold)
  activation("aten::softplus_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                   LoweringContext& ctx) {
    ElementType t = b.element_type(x[1]);
    Value beta = b.splat(ctx.scalar(2, t), b.dims(x[1]));
    Value threshold = b.splat(ctx.scalar(3, t), b.dims(x[1]));
    Value bx = b.binary("multiply", x[1], beta);
    Value z = b.unary("exponential", bx);
    Value d = b.binary("divide", z, b.binary("add", z, splat_like(b, 1.0, z)));
    return b.select(b.compare(bx, threshold, hlo::Compare::kGt), x[0], b.binary("multiply", x[0], d));
  }, {"aten::softplus_backward.grad_input"});
  // elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
  activation("aten::elu_backward", {0, 5}, [](Builder& b, const std::vector<Value>& x,
                                              LoweringContext& ctx) {
    ElementType t = b.element_type(x[0]);
    auto dims = b.dims(x[0]);
    Value alpha = b.splat(ctx.scalar(1, t), dims), scale = b.splat(ctx.scalar(2, t), dims);
    Value input_scale = b.splat(ctx.scalar(3, t), dims);
    bool is_result = ctx.bool_arg(4);
    Value v = x[1];
    Value neg_grad;
    if (is_result) {
      // d/dx = input_scale * (result + alpha * scale) for result <= 0
      neg_grad = b.binary("multiply", input_scale, b.binary("add", v, b.binary("multiply", alpha, scale)));
    } else {
      neg_grad = b.binary("multiply", b.binary("multiply", input_scale, b.binary("multiply", alpha, scale)),
                          b.unary("exponential", b.binary("multiply", v, input_scale)));
    }
    Value positive = b.compare(v, splat_like(b, 0, v), hlo::Compare::kGt);
    return b.binary("multiply", x[0], b.select(positive, scale, neg_grad));
  }, {"aten::elu_backward.grad_input"});
  activation("aten::hardsigmoid", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    Value r = b.binary("divide", b.binary("add", x[0], splat_like(b, 3.0, x[0])), splat_like(b, 6.0, x[0]));
    return b.binary("minimum", b.binary("maximum", r, splat_like(b, 0.0, r)), splat_like(b, 1.0, r));
  }, {"aten::hardsigmoid_", "aten::hardsigmoid.out"});
  activation("aten::hardswish", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    Value r = b.binary("divide", b.binary("add", x[0], splat_like(b, 3.0, x[0])), splat_like(b, 6.0, x[0]));
    r = b.binary("minimum", b.binary("maximum", r, splat_like(b, 0.0, r)), splat_like(b, 1.0, r));
    return b.binary("multiply", x[0], r);
  }, {"aten::hardswish_", "aten::hardswish.out"});
  activation("aten::hardswish_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    Value v = x[1];
    Value mid = b.binary("divide", b.binary("add", b.binary("multiply", splat_like(b, 2.0, v), v), splat_like(b, 3.0, v)),
                         splat_like(b, 6.0, v));
    Value d = b.select(b.compare(v, splat_like(b, -3.0, v), hlo::Compare::kLt), splat_like(b, 0.0, v),
                       b.select(b.compare(v, splat_like(b, 3.0, v), hlo::Compare::kLe), mid, splat_like(b, 1.0, v)));
    return b.binary("multiply", x[0], d);
  }, {"aten::hardswish_backward.out"});
  activation("aten::hardsigmoid_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x, LoweringContext&) {
    Value v = x[1];
    Value inside = b.binary("and", b.compare(v, splat_like(b, -3.0, v), hlo::Compare::kGt),
                            b.compare(v, splat_like(b, 3.0, v), hlo::Compare::kLt));
    return b.select(inside, b.binary("divide", x[0], splat_like(b, 6.0, v)), splat_like(b, 0.0, v));
  }, {"aten::hardsigmoid_backward.grad_input"});
  // logit(self, eps=None) = log(x / (1 - x)), x clamped to [eps, 1 - eps];
  // integers and bool give the default float dtype.
  register_lowering("aten::logit", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = float_type(ctx.dtype(0));
    Value v = convert(b, ctx.tensor(0), opmath_type(type));
    if (!ctx.is_none(1)) {
      Value eps = b.splat(ctx.scalar(1, b.element_type(v)), b.dims(v));
      v = b.binary("minimum", b.binary("maximum", v, eps),
                   b.binary("subtract", splat_like(b, 1.0, v), eps));
    }
    Value y = b.unary("log", b.binary("divide", v, b.binary("subtract", splat_like(b, 1.0, v), v)));
    return std::vector<Value>{convert(b, y, type)};
  }, {"aten::logit_", "aten::logit.out"});
  activation("aten::logit_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x, LoweringContext& ctx) {
    Value v = x[1];
    Value d = b.binary("divide", x[0], b.binary("multiply", v, b.binary("subtract", splat_like(b, 1.0, v), v)));
    if (!ctx.is_none(2)) {
      Value eps = b.splat(ctx.scalar(2, b.element_type(v)), b.dims(v));
      Value outside = b.binary("or", b.compare(v, eps, hlo::Compare::kLt),
                               b.compare(v, b.binary("subtract", splat_like(b, 1.0, v), eps),
                                         hlo::Compare::kGt));
      d = b.select(outside, splat_like(b, 0.0, v), d);
    }
    return d;
  }, {"aten::logit_backward.grad_input"});
  activation("aten::tanh_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                               LoweringContext&) {
    Value one = splat_like(b, 1.0, x[1]);
    return b.binary("multiply", x[0], b.binary("subtract", one, b.binary("multiply", x[1], x[1])));
  }, {"aten::tanh_backward.grad_input"});
  activation("aten::sigmoid_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                  LoweringContext&) {
    Value one = splat_like(b, 1.0, x[1]);
    return b.binary("multiply", x[0], b.binary("multiply", x[1], b.binary("subtract", one, x[1])));
  }, {"aten::sigmoid_backward.grad_input"});
  activation("aten::hardtanh", {0}, [](Builder& b, const std::vector<Value>& x,
                                       LoweringContext& ctx) {
    ElementType t = b.element_type(x[0]);
    Value lo = b.splat(ctx.scalar(1, t), b.dims(x[0])), hi = b.splat(ctx.scalar(2, t), b.dims(x[0]));
    return b.binary("minimum", b.binary("maximum", x[0], lo), hi);
  }, {"aten::hardtanh_", "aten::hardtanh.out"});
  activation("aten::hardtanh_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                   LoweringContext& ctx) {
    ElementType t = b.element_type(x[1]);
    Value lo = b.splat(ctx.scalar(2, t), b.dims(x[1])), hi = b.splat(ctx.scalar(3, t), b.dims(x[1]));
    Value inside = b.binary("and", b.compare(x[1], lo, hlo::Compare::kGt),
                            b.compare(x[1], hi, hlo::Compare::kLt));
    return b.select(inside, x[0], b.zeros(TensorType{t, b.dims(x[0])}));
  }, {"aten::hardtanh_backward.grad_input"});
  activation("aten::leaky_relu", {0}, [](Builder& b, const std::vector<Value>& x,
                                         LoweringContext& ctx) {
    Value slope = b.splat(ctx.scalar(1, b.element_type(x[0])), b.dims(x[0]));
    return b.select(b.compare(x[0], splat_like(b, 0, x[0]), hlo::Compare::kGt), x[0],
                    b.binary("multiply", x[0], slope));
  }, {"aten::leaky_relu_", "aten::leaky_relu.out"});
  activation("aten::leaky_relu_backward", {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                     LoweringContext& ctx) {
    Value slope = b.splat(ctx.scalar(2, b.element_type(x[0])), b.dims(x[0]));
    return b.select(b.compare(x[1], splat_like(b, 0, x[1]), hlo::Compare::kGt), x[0],
                    b.binary("multiply", x[0], slope));
  }, {"aten::leaky_relu_backward.grad_input"});
  // hardshrink_backward(grad, self, lambd): grad where |x| > lambd;
  // softshrink_backward the same.
  for (const char* name : {"hardshrink_backward", "softshrink_backward"}) {
    activation(std::string("aten::") + name, {0, 1}, [](Builder& b, const std::vector<Value>& x,
                                                        LoweringContext& ctx) {
      Value lambd = b.splat(ctx.scalar(2, b.element_type(x[1])), b.dims(x[1]));
      Value outside = b.binary("or", b.compare(x[1], lambd, hlo::Compare::kGt),
                               b.compare(x[1], b.unary("negate", lambd), hlo::Compare::kLt));
      return b.select(outside, x[0], splat_like(b, 0, x[0]));
    }, {std::string("aten::") + name + ".grad_input"});
  }
  activation("aten::elu", {0}, [](Builder& b, const std::vector<Value>& x, LoweringContext& ctx) {
    ElementType t = b.element_type(x[0]);
    Value alpha = b.splat(ctx.scalar(1, t), b.dims(x[0]));
    Value scale = b.splat(ctx.scalar(2, t), b.dims(x[0]));
    Value input_scale = b.splat(ctx.scalar(3, t), b.dims(x[0]));
    Value neg = b.binary("multiply", alpha, b.unary("exponential_minus_one",
                                                    b.binary("multiply", x[0], input_scale)));
    Value pos = b.compare(x[0], splat_like(b, 0, x[0]), hlo::Compare::kGt);
    return b.binary("multiply", scale, b.select(pos, x[0], neg));
  }, {"aten::elu_", "aten::elu.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
