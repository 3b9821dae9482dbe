// Convolutions (1-D, 2-D and 3-D, stride, padding, dilation, groups, transposed)
// and their backward, all as StableHLO convolutions. The gradient of a
// convolution's input is the transposed convolution and vice versa; grouped
// gradients are computed per group, which keeps every layout ungrouped.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
  int64_t spatial = 2;
};

std::vector<int64_t> expand_param(std::vector<int64_t> v, int64_t n, int64_t fill) {
  if (v.empty()) return std::vector<int64_t>(n, fill);
  if (static_cast<int64_t>(v.size()) == 1 && n > 1) return std::vector<int64_t>(n, v[0]);
  return v;
}

std::string numbers(int64_t spatial, const char* lhs, const char* rhs, const char* out) {
  std::string dims;
  for (int64_t i = 0; i < spatial; ++i) dims += ", " + std::to_string(i);
  return std::string("[") + lhs + dims + "]x[" + rhs + dims + "]->[" + out + dims + "]";
}

Value slice_dim(Builder& b, Value x, int64_t dim, int64_t start, int64_t size) {
  auto dims = b.dims(x);
  std::vector<int64_t> lo(dims.size(), 0), hi = dims, st(dims.size(), 1);
  lo[dim] = start;
  hi[dim] = start + size;
  return b.slice(x, lo, hi, st);
}

// y = conv(x, w): x [N, C, *in], w [O, C/g, *k] -> [N, O, *out].
Value conv_forward(Builder& b, Value x, Value w, const ConvParams& p, ElementType acc) {
  auto xd = b.dims(x), wd = b.dims(w);
  std::vector<int64_t> out = {xd[0], wd[0]};
  Builder::ConvAttrs a;
  for (int64_t i = 0; i < p.spatial; ++i) {
    int64_t in = xd[2 + i], k = wd[2 + i];
    int64_t o = (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1;
    TORCH_CHECK(o > 0, "Calculated output size is too small for input of spatial size ", in);
    out.push_back(o);
    a.padding.push_back({p.padding[i], p.padding[i]});
  }
  a.window_strides = p.stride;
  a.rhs_dilation = p.dilation;
  a.lhs_dilation = std::vector<int64_t>(p.spatial, 1);
  a.feature_group_count = p.groups;
  a.dimension_numbers = numbers(p.spatial, "b, f", "o, i", "b, f");
  return b.convolution(x, w, a, out, acc);
}

// The gradient of conv_forward with respect to x, for groups == 1: a
// convolution of the stride-dilated gradient with the flipped, transposed
// kernel. `in` are x's spatial sizes.
Value conv_input_grad(Builder& b, Value g, Value w, const ConvParams& p,
                      const std::vector<int64_t>& in, int64_t batch, ElementType acc) {
  auto wd = b.dims(w);
  std::vector<int64_t> flip;
  for (int64_t i = 0; i < p.spatial; ++i) flip.push_back(2 + i);
  Value wf = b.reverse(w, flip);  // [O, C, k] used as [i=O, o=C]
  std::vector<int64_t> out = {batch, wd[1]};
  Builder::ConvAttrs a;
  auto gd = b.dims(g);
  for (int64_t i = 0; i < p.spatial; ++i) {
    int64_t k = wd[2 + i];
    int64_t low = p.dilation[i] * (k - 1) - p.padding[i];
    // Dilated gradient length + pads must give back `in`.
    int64_t dilated = (gd[2 + i] - 1) * p.stride[i] + 1;
    int64_t high = in[i] - dilated - low + p.dilation[i] * (k - 1);
    a.padding.push_back({low, high});
    out.push_back(in[i]);
  }
  a.window_strides = std::vector<int64_t>(p.spatial, 1);
  a.lhs_dilation = p.stride;
  a.rhs_dilation = p.dilation;
  a.dimension_numbers = numbers(p.spatial, "b, f", "i, o", "b, f");
  return b.convolution(g, wf, a, out, acc);
}

// The gradient with respect to w, for groups == 1: x and g convolved with
// the batch as the contracted dimension. Returns [O, C, *k].
Value conv_weight_grad(Builder& b, Value x, Value g, const ConvParams& p,
                       const std::vector<int64_t>& k, ElementType acc) {
  auto xd = b.dims(x), gd = b.dims(g);
  std::vector<int64_t> out = {xd[1], gd[1]};  // [C, O, *k] in "b, f" = (C, O)
  Builder::ConvAttrs a;
  for (int64_t i = 0; i < p.spatial; ++i) {
    int64_t low = p.padding[i];
    int64_t span = (gd[2 + i] - 1) * p.stride[i] + 1;
    int64_t high = (k[i] - 1) * p.dilation[i] + span - xd[2 + i] - low;
    a.padding.push_back({low, high});
    out.push_back(k[i]);
  }
  a.window_strides = p.dilation;
  a.rhs_dilation = p.stride;
  a.lhs_dilation = std::vector<int64_t>(p.spatial, 1);
  a.dimension_numbers = numbers(p.spatial, "f, b", "i, o", "b, f");
  Value r = b.convolution(x, g, a, out, acc);  // [C, O, *k]
  std::vector<int64_t> perm = {1, 0};
  for (int64_t i = 0; i < p.spatial; ++i) perm.push_back(2 + i);
  return b.transpose(r, perm);
}

ConvParams params(LoweringContext& ctx, size_t first, int64_t spatial) {
  ConvParams p;
  p.spatial = spatial;
  p.stride = expand_param(ctx.int_list(first), spatial, 1);
  p.padding = expand_param(ctx.int_list(first + 1), spatial, 0);
  p.dilation = expand_param(ctx.int_list(first + 2), spatial, 1);
  p.transposed = ctx.bool_arg(first + 3);
  p.output_padding = expand_param(ctx.int_list(first + 4), spatial, 0);
  p.groups = ctx.int_arg(first + 5);
  return p;
}

// Per-group application of an ungrouped gradient formula.
template <typename Fn>
Value per_group(Builder& b, int64_t groups, Value a, int64_t a_dim, Value c, int64_t c_dim,
                int64_t out_dim, Fn fn) {
  if (groups == 1) return fn(a, c);
  int64_t as = b.dims(a)[a_dim] / groups, cs = b.dims(c)[c_dim] / groups;
  std::vector<Value> parts;
  for (int64_t g = 0; g < groups; ++g) {
    parts.push_back(fn(slice_dim(b, a, a_dim, g * as, as), slice_dim(b, c, c_dim, g * cs, cs)));
  }
  return b.concatenate(parts, out_dim);
}

LoweringRegistrar registrar([] {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  register_lowering("aten::convolution", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0), w = ctx.tensor(1);
    int64_t rank = b.type(x).rank();
    TORCH_CHECK(rank >= 3 && rank <= 5, "torch_pjrt: convolution supports 1-D, 2-D and 3-D inputs "
                "(batched), got input of shape ", c10::IntArrayRef(b.dims(x)));
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "Input type (", ctx.dtype(0), ") and weight type (",
                ctx.dtype(1), ") should be the same");
    ConvParams p = params(ctx, 3, rank - 2);
    c10::ScalarType type = ctx.dtype(0);
    ElementType acc = et(opmath_type(type));
    auto xd = b.dims(x), wd = b.dims(w);
    Value y;
    if (!p.transposed) {
      TORCH_CHECK(xd[1] == wd[1] * p.groups, "Given groups=", p.groups, ", weight of size ",
                  c10::IntArrayRef(wd), ", expected input", c10::IntArrayRef(xd), " to have ",
                  wd[1] * p.groups, " channels, but got ", xd[1], " channels instead");
      y = conv_forward(b, x, w, p, acc);
    } else {
      // A transposed convolution is the input gradient of the forward one
      // whose weight is `w` ([C_in, C_out/g, k]).
      TORCH_CHECK(xd[1] == wd[0], "Given transposed=1, weight of size ", c10::IntArrayRef(wd),
                  ", expected input", c10::IntArrayRef(xd), " to have ", wd[0],
                  " channels, but got ", xd[1], " channels instead");
      std::vector<int64_t> in;
      for (int64_t i = 0; i < p.spatial; ++i) {
        in.push_back((xd[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
                     p.dilation[i] * (wd[2 + i] - 1) + p.output_padding[i] + 1);
      }
      y = per_group(b, p.groups, x, 1, w, 0, 1, [&](Value xg, Value wg) {
        return conv_input_grad(b, xg, wg, p, in, xd[0], acc);
      });
    }
    if (!ctx.is_none(2)) {
      Value bias = b.convert(ctx.tensor(2), acc);
      y = b.binary("add", y, b.broadcast_in_dim(bias, b.dims(y), {1}));
    }
    return std::vector<Value>{b.convert(y, et(type))};
  }, {"aten::convolution.out"});

  // convolution_backward(grad, input, weight, bias_sizes, stride, padding,
  //                      dilation, transposed, output_padding, groups, output_mask)
  register_lowering("aten::convolution_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value g = ctx.tensor(0), x = ctx.tensor(1), w = ctx.tensor(2);
    int64_t rank = b.type(x).rank();
    ConvParams p = params(ctx, 4, rank - 2);
    c10::ScalarType type = ctx.dtype(1);
    ElementType acc = et(opmath_type(type));
    g = b.convert(g, acc);
    Value xa = b.convert(x, acc), wa = b.convert(w, acc);
    auto xd = b.dims(x), wd = b.dims(w);
    std::vector<int64_t> in(xd.begin() + 2, xd.end()), k(wd.begin() + 2, wd.end());
    Value grad_input, grad_weight;
    if (!p.transposed) {
      grad_input = per_group(b, p.groups, g, 1, wa, 0, 1, [&](Value gg, Value wg) {
        return conv_input_grad(b, gg, wg, p, in, xd[0], acc);
      });
      grad_weight = per_group(b, p.groups, xa, 1, g, 1, 0, [&](Value xg, Value gg) {
        return conv_weight_grad(b, xg, gg, p, k, acc);
      });
    } else {
      // A transposed convolution is the input gradient of a forward one
      // (input: its output, weight: w as [C_in, C_out/g, k]). So dx is that
      // forward convolution of g, and dw its weight gradient with g as the
      // input and x as the output gradient, already in w's layout.
      grad_input = conv_forward(b, g, wa, p, acc);
      // output_padding may reach past the last input position (it may be
      // as large as the dilation): that part has no input to flow back to.
      auto gi = b.dims(grad_input);
      std::vector<int64_t> lo(gi.size(), 0), hi = gi, st(gi.size(), 1);
      for (int64_t i = 0; i < p.spatial; ++i) hi[2 + i] = std::min(gi[2 + i], in[i]);
      grad_input = b.slice(grad_input, lo, hi, st);
      grad_weight = per_group(b, p.groups, g, 1, xa, 1, 0, [&](Value gg, Value xg) {
        return conv_weight_grad(b, gg, xg, p, k, acc);
      });
    }
    std::vector<int64_t> reduce_dims = {0};
    for (int64_t i = 2; i < rank; ++i) reduce_dims.push_back(i);
    Value grad_bias = reduce(b, g, reduce_dims, ReduceKind::kSum);
    return std::vector<Value>{b.convert(grad_input, et(type)), b.convert(grad_weight, et(type)),
                              b.convert(grad_bias, et(type))};
  }, {"aten::convolution_backward.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
