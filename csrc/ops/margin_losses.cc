// The backward ops of the multi-class margin losses (their forward runs
// through torch's decompositions):
//   - multi_margin_loss: for each sample's target y and other class i with
//     z = margin - x[y] + x[i] > 0, the gradient of (z or z^2) * w[y] / C
//     goes to x[i] and, negated, to x[y];
//   - multilabel_margin_loss: the same hinge with margin 1 between each
//     listed target (the list ends at the first -1) and each class that is
//     not a target, counted as often as the target is listed.
// Both are dense over classes ([N, C] and [N, C, C] masks), no loops.
#include <c10/util/Exception.h>

#include <vector>

#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

// The incoming gradient per sample ([N]), scaled for the reduction.
Value per_sample_grad(Builder& b, Value grad_output, int64_t reduction, int64_t n, ElementType t) {
  Value g = b.convert(grad_output, t);
  if (reduction == kNone) return b.reshape(g, {n});
  g = b.splat(b.reshape(g, {}), {n});
  if (reduction == kMean && n > 0) g = b.binary("divide", g, b.splat(b.constant(static_cast<double>(n), t), {n}));
  return g;
}

// x as [N, C], with 1-D input as one sample.
Value as_batch(Builder& b, Value x, int64_t& n, int64_t& c) {
  auto d = b.dims(x);
  c = d.empty() ? 1 : d.back();
  n = d.size() <= 1 ? 1 : d[0];
  return b.reshape(x, {n, c});
}

LoweringRegistrar registrar([] {
  // multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction)
  register_lowering("aten::multi_margin_loss_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType t = et(opmath_type(type));
    auto in_dims = b.dims(ctx.tensor(1));
    int64_t n, c;
    Value x = b.convert(as_batch(b, ctx.tensor(1), n, c), t);
    Value y = b.reshape(b.convert(ctx.tensor(2), ElementType::kS64), {n});
    std::vector<int64_t> nc{n, c};
    Value is_y = b.compare(index_of(b, nc, 1), b.broadcast_in_dim(y, nc, {0}), Compare::kEq);
    Value xy = b.broadcast_in_dim(pick(b, is_y, x, 1), nc, {0});
    Value p = b.splat(ctx.scalar(3, t), nc), margin = b.splat(ctx.scalar(4, t), nc);
    Value z = b.binary("add", b.binary("subtract", margin, xy), x);
    Value active = b.binary("and", b.compare(z, b.zeros(b.type(z)), Compare::kGt), b.unary("not", is_y));
    Value one = b.splat(b.constant(1.0, t), nc);
    Value slope = b.select(b.compare(p, one, Compare::kEq), one,
                           b.binary("multiply", b.splat(b.constant(2.0, t), nc), z));
    Value g = per_sample_grad(b, ctx.tensor(0), ctx.int_arg(6), n, t);
    Value scale = b.binary("divide", g, b.splat(b.constant(static_cast<double>(c), t), {n}));
    if (!ctx.is_none(5)) {
      Value w = b.convert(ctx.tensor(5), t);
      Value wy = pick(b, is_y, b.broadcast_in_dim(w, nc, {1}), 1);
      scale = b.binary("multiply", scale, wy);
    }
    Value h = b.select(active, b.binary("multiply", slope, b.broadcast_in_dim(scale, nc, {0})), b.zeros(b.type(z)));
    Value to_y = b.unary("negate", reduce(b, h, {1}, ReduceKind::kSum));
    Value grad = b.binary("add", h, b.select(is_y, b.broadcast_in_dim(to_y, nc, {0}), b.zeros(b.type(h))));
    return std::vector<Value>{convert(b, b.reshape(grad, in_dims), type)};
  }, {"aten::multi_margin_loss_backward.grad_input"});

  // multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target)
  register_lowering("aten::multilabel_margin_loss_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(1);
    ElementType t = et(opmath_type(type));
    auto in_dims = b.dims(ctx.tensor(1));
    int64_t n, c;
    Value x = b.convert(as_batch(b, ctx.tensor(1), n, c), t);
    int64_t n2, c2;
    Value target = b.convert(as_batch(b, ctx.tensor(2), n2, c2), ElementType::kS64);
    Value not_target = b.compare(b.convert(as_batch(b, ctx.tensor(4), n2, c2), t), b.zeros(TensorType{t, {n, c}}),
                                 Compare::kEq);
    std::vector<int64_t> nc{n, c}, ncc{n, c, c};
    // Entries before the first -1 are the targets.
    Value j = index_of(b, nc, 1);
    Value end = reduce(b, b.select(b.compare(target, b.splat(b.constant_int(-1, ElementType::kS64), nc), Compare::kEq),
                                   j, b.splat(b.constant_int(c, ElementType::kS64), nc)),
                       {1}, ReduceKind::kMin);
    Value listed = b.compare(j, b.broadcast_in_dim(end, nc, {0}), Compare::kLt);
    // count[n, k]: how often class k is listed; [n, entry j, class k] masks.
    Value hit = b.binary("and", b.compare(b.broadcast_in_dim(target, ncc, {0, 1}), index_of(b, ncc, 2), Compare::kEq),
                         b.broadcast_in_dim(listed, ncc, {0, 1}));
    Value count = reduce(b, b.convert(hit, t), {1}, ReduceKind::kSum);  // [n, c]
    // z[n, k, i] = 1 - x[k] + x[i] for target class k and other class i.
    Value xk = b.broadcast_in_dim(x, ncc, {0, 1}), xi = b.broadcast_in_dim(x, ncc, {0, 2});
    Value z = b.binary("add", b.binary("subtract", b.splat(b.constant(1.0, t), ncc), xk), xi);
    Value active = b.binary("and", b.compare(z, b.zeros(b.type(z)), Compare::kGt),
                            b.broadcast_in_dim(not_target, ncc, {0, 2}));
    Value weight = b.select(active, b.broadcast_in_dim(count, ncc, {0, 1}), b.zeros(b.type(z)));
    Value g = per_sample_grad(b, ctx.tensor(0), ctx.int_arg(3), n, t);
    Value scale = b.broadcast_in_dim(b.binary("divide", g, b.splat(b.constant(static_cast<double>(c), t), {n})),
                                     nc, {0});
    Value to_i = reduce(b, weight, {1}, ReduceKind::kSum);
    Value to_k = reduce(b, weight, {2}, ReduceKind::kSum);
    Value grad = b.binary("multiply", b.binary("subtract", to_i, to_k), scale);
    return std::vector<Value>{convert(b, b.reshape(grad, in_dims), type)};
  }, {"aten::multilabel_margin_loss_backward.grad_input"});
});

}  // namespace
}  // namespace torch_pjrt::ops
