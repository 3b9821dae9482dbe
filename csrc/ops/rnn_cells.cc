// The fused LSTM and GRU cells that torch's nn.LSTM, nn.GRU, nn.LSTMCell and
// nn.GRUCell call on every device but the CPU (_thnn_fused_lstm_cell,
// _thnn_fused_gru_cell) and their backward ops. torch has only CUDA kernels
// for them, so without these lowerings the CPU fallback found no kernel and
// recurrent layers did not run on tpu at all.
//
// The gate layout is torch's: LSTM chunks (input, forget, cell, output) of
// 4H columns, GRU chunks (reset, update, new) of 3H. Each forward returns a
// workspace the backward reads, as the CUDA kernels do: the LSTM's four
// activated gates [B, 4H]; the GRU's reset, update and new gates, the
// previous hidden state and the hidden side of the new gate [B, 5H]. The
// arithmetic runs in the opmath type (float32 for half types).
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value chunk(Builder& b, Value x, int64_t k, int64_t width) {
  auto dims = b.dims(x);
  return b.slice(x, {0, k * width}, {dims[0], (k + 1) * width}, {1, 1});
}

Value one_minus(Builder& b, Value x) {
  return b.binary("subtract", b.splat(b.constant(1.0, b.element_type(x)), b.dims(x)), x);
}

// gates = input_gates + hidden_gates (+ both biases), in `compute`.
Value summed_gates(LoweringContext& ctx, int64_t chunks, const char* op, c10::ScalarType compute) {
  Builder& b = ctx.b;
  Value ig = ctx.tensor(0), hg = ctx.tensor(1), state = ctx.tensor(2);
  TORCH_CHECK(b.type(ig).rank() == 2 && b.dims(ig) == b.dims(hg), op,
              ": input_gates and hidden_gates must be 2-D of one shape, got ",
              c10::IntArrayRef(b.dims(ig)), " and ", c10::IntArrayRef(b.dims(hg)));
  TORCH_CHECK(b.type(state).rank() == 2 && b.dims(state)[0] == b.dims(ig)[0] &&
                  b.dims(ig)[1] == chunks * b.dims(state)[1],
              op, ": the gates ", c10::IntArrayRef(b.dims(ig)), " do not match the state ",
              c10::IntArrayRef(b.dims(state)), " (", chunks, " gates per hidden unit)");
  TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1) && ctx.dtype(0) == ctx.dtype(2), op,
              ": expected one dtype, got ", ctx.dtype(0), ", ", ctx.dtype(1), " and ", ctx.dtype(2));
  Value gates = b.binary("add", convert(b, ig, compute), convert(b, hg, compute));
  TORCH_CHECK(ctx.is_none(3) == ctx.is_none(4), op, ": give both biases or neither");
  if (!ctx.is_none(3)) {
    for (int i : {3, 4}) {
      TORCH_CHECK(b.type(ctx.tensor(i)).rank() == 1 && b.dims(ctx.tensor(i))[0] == b.dims(ig)[1], op,
                  ": a bias must have ", b.dims(ig)[1], " elements, got ",
                  c10::IntArrayRef(b.dims(ctx.tensor(i))));
      gates = b.binary("add", gates, b.broadcast_in_dim(convert(b, ctx.tensor(i), compute),
                                                          b.dims(gates), {1}));
    }
  }
  return gates;
}

Value bias_grad(Builder& b, Value grad_gates, bool has_bias, c10::ScalarType type) {
  if (!has_bias) return b.zeros(TensorType{et(type), {0}});
  return convert(b, reduce(b, grad_gates, {0}, ReduceKind::kSum), type);
}

LoweringRegistrar registrar([] {
  // _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias,
  // hidden_bias) -> (hy, cy, workspace)
  register_lowering("aten::_thnn_fused_lstm_cell", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0), compute = opmath_type(type);
    Value gates = summed_gates(ctx, 4, "_thnn_fused_lstm_cell", compute);
    int64_t h = b.dims(ctx.tensor(2))[1];
    Value i = b.unary("logistic", chunk(b, gates, 0, h));
    Value f = b.unary("logistic", chunk(b, gates, 1, h));
    Value g = b.unary("tanh", chunk(b, gates, 2, h));
    Value o = b.unary("logistic", chunk(b, gates, 3, h));
    Value cx = convert(b, ctx.tensor(2), compute);
    Value cy = b.binary("add", b.binary("multiply", f, cx), b.binary("multiply", i, g));
    Value hy = b.binary("multiply", o, b.unary("tanh", cy));
    Value workspace = b.concatenate({i, f, g, o}, 1);
    return std::vector<Value>{convert(b, hy, type), convert(b, cy, type), convert(b, workspace, type)};
  });

  // _thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace,
  // has_bias) -> (grad_gates, grad_cx, grad_bias)
  register_lowering("aten::_thnn_fused_lstm_cell_backward_impl", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(4), compute = opmath_type(type);
    Value cx = convert(b, ctx.tensor(2), compute), cy = convert(b, ctx.tensor(3), compute);
    Value ws = convert(b, ctx.tensor(4), compute);
    auto dims = b.dims(cx);
    int64_t h = dims[1];
    TORCH_CHECK(b.dims(ws) == std::vector<int64_t>({dims[0], 4 * h}),
                "_thnn_fused_lstm_cell_backward: workspace ", c10::IntArrayRef(b.dims(ws)),
                " does not match the cell state ", c10::IntArrayRef(dims));
    Value zero = b.zeros(TensorType{et(compute), dims});
    Value ghy = ctx.is_none(0) ? zero : convert(b, ctx.tensor(0), compute);
    Value gcy = ctx.is_none(1) ? zero : convert(b, ctx.tensor(1), compute);
    Value i = chunk(b, ws, 0, h), f = chunk(b, ws, 1, h), g = chunk(b, ws, 2, h), o = chunk(b, ws, 3, h);
    Value tanh_cy = b.unary("tanh", cy);
    // The cell state's gradient: its own plus the hidden state's through
    // hy = o * tanh(cy).
    Value gc = b.binary("add", gcy, b.binary("multiply", b.binary("multiply", ghy, o),
                                               one_minus(b, b.binary("multiply", tanh_cy, tanh_cy))));
    Value gi = b.binary("multiply", b.binary("multiply", gc, g), b.binary("multiply", i, one_minus(b, i)));
    Value gf = b.binary("multiply", b.binary("multiply", gc, cx), b.binary("multiply", f, one_minus(b, f)));
    Value gg = b.binary("multiply", b.binary("multiply", gc, i), one_minus(b, b.binary("multiply", g, g)));
    Value go = b.binary("multiply", b.binary("multiply", ghy, tanh_cy), b.binary("multiply", o, one_minus(b, o)));
    Value grad_gates = b.concatenate({gi, gf, gg, go}, 1);
    Value grad_cx = b.binary("multiply", gc, f);
    return std::vector<Value>{convert(b, grad_gates, type), convert(b, grad_cx, type),
                              bias_grad(b, grad_gates, ctx.bool_arg(5), type)};
  });

  // _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias,
  // hidden_bias) -> (hy, workspace)
  register_lowering("aten::_thnn_fused_gru_cell", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0), compute = opmath_type(type);
    // Checked and validated with the summed r and z gates; the new gate
    // keeps its hidden side apart (it is scaled by r).
    summed_gates(ctx, 3, "_thnn_fused_gru_cell", compute);
    int64_t h = b.dims(ctx.tensor(2))[1];
    Value ig = convert(b, ctx.tensor(0), compute), hg = convert(b, ctx.tensor(1), compute);
    if (!ctx.is_none(3)) {
      ig = b.binary("add", ig, b.broadcast_in_dim(convert(b, ctx.tensor(3), compute), b.dims(ig), {1}));
      hg = b.binary("add", hg, b.broadcast_in_dim(convert(b, ctx.tensor(4), compute), b.dims(hg), {1}));
    }
    Value r = b.unary("logistic", b.binary("add", chunk(b, ig, 0, h), chunk(b, hg, 0, h)));
    Value z = b.unary("logistic", b.binary("add", chunk(b, ig, 1, h), chunk(b, hg, 1, h)));
    Value hn = chunk(b, hg, 2, h);
    Value n = b.unary("tanh", b.binary("add", chunk(b, ig, 2, h), b.binary("multiply", r, hn)));
    Value hx = convert(b, ctx.tensor(2), compute);
    // hy = (1 - z) * n + z * hx
    Value hy = b.binary("add", n, b.binary("multiply", z, b.binary("subtract", hx, n)));
    Value workspace = b.concatenate({r, z, n, hx, hn}, 1);
    return std::vector<Value>{convert(b, hy, type), convert(b, workspace, type)};
  });

  // _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
  // (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
  // grad_hidden_bias)
  register_lowering("aten::_thnn_fused_gru_cell_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0), compute = opmath_type(type);
    Value go = convert(b, ctx.tensor(0), compute), ws = convert(b, ctx.tensor(1), compute);
    auto dims = b.dims(go);
    TORCH_CHECK(dims.size() == 2 && b.dims(ws) == std::vector<int64_t>({dims[0], 5 * dims[1]}),
                "_thnn_fused_gru_cell_backward: workspace ", c10::IntArrayRef(b.dims(ws)),
                " does not match grad_hy ", c10::IntArrayRef(dims));
    int64_t h = dims[1];
    Value r = chunk(b, ws, 0, h), z = chunk(b, ws, 1, h), n = chunk(b, ws, 2, h);
    Value hx = chunk(b, ws, 3, h), hn = chunk(b, ws, 4, h);
    Value gz = b.binary("multiply", b.binary("multiply", go, b.binary("subtract", hx, n)),
                        b.binary("multiply", z, one_minus(b, z)));
    Value ghx = b.binary("multiply", go, z);
    Value gn = b.binary("multiply", b.binary("multiply", go, one_minus(b, z)),
                        one_minus(b, b.binary("multiply", n, n)));
    Value ghn = b.binary("multiply", gn, r);
    Value gr = b.binary("multiply", b.binary("multiply", gn, hn), b.binary("multiply", r, one_minus(b, r)));
    Value grad_input = b.concatenate({gr, gz, gn}, 1);
    Value grad_hidden = b.concatenate({gr, gz, ghn}, 1);
    bool has_bias = ctx.bool_arg(2);
    return std::vector<Value>{convert(b, grad_input, type), convert(b, grad_hidden, type),
                              convert(b, ghx, type), bias_grad(b, grad_input, has_bias, type),
                              bias_grad(b, grad_hidden, has_bias, type)};
  });
});

}  // namespace
}  // namespace torch_pjrt::ops
