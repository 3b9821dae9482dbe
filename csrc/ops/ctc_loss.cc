// CTC loss: aten::_ctc_loss and aten::_ctc_loss_backward, each with int[]
// lengths (static: part of the program) and Tensor lengths (data, checked on
// the device). Both run in log space over the extended target l' (blanks
// around and between the labels, width L = 2 * max target length + 1):
// the forward is one stablehlo.while over time computing alpha for all
// samples and positions at once, per-sample lengths applied as masks; the
// backward runs beta the same way backwards in time, then forms
//   grad[t, c] = exp(lp[t, c]) - sum_{s: l'_s = c} exp(alpha + beta - lp + nll)
// (Graves et al. 2006) with one batched dot against the one-hot labels.
// log_alpha is [N, T, L] as on CPU, -inf where CPU leaves it uninitialized;
// with Tensor lengths L cannot follow the data, so it is 2 * S + 1 for the
// longest target the layout holds (targets.size(1), or numel concatenated).
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/ctc_loss.h"
#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

constexpr ElementType kI64 = ElementType::kS64;

Value full(Builder& b, double v, ElementType t, const std::vector<int64_t>& dims) {
  return b.splat(b.constant(v, t), dims);
}
Value full_int(Builder& b, int64_t v, const std::vector<int64_t>& dims) {
  return b.splat(b.constant_int(v, kI64), dims);
}
Value neg_inf_like(Builder& b, Value x) { return full(b, -INFINITY, b.element_type(x), b.dims(x)); }

// An s64 [n] constant.
Value int_vector(Builder& b, const std::vector<int64_t>& values) {
  std::vector<Value> parts;
  for (int64_t v : values) parts.push_back(b.reshape(b.constant_int(v, kI64), {1}));
  return parts.size() == 1 ? parts[0] : b.concatenate(parts, 0);
}

// log(sum(exp(xs))) elementwise, exact -inf when every term is -inf.
Value logsumexp(Builder& b, const std::vector<Value>& xs) {
  Value m = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) m = b.binary("maximum", m, xs[i]);
  Value safe = b.select(b.compare(m, neg_inf_like(b, m), Compare::kEq), b.zeros(b.type(m)), m);
  Value sum;
  for (Value x : xs) {
    Value e = b.unary("exponential", b.binary("subtract", x, safe));
    sum = sum.valid() ? b.binary("add", sum, e) : e;
  }
  return b.binary("add", b.unary("log", sum), safe);
}

// logsumexp of a rank-2 x over its last dim.
Value logsumexp_rows(Builder& b, Value x) {
  auto d = b.dims(x);
  Value m = reduce(b, x, {1}, ReduceKind::kMax);
  Value safe = b.select(b.compare(m, neg_inf_like(b, m), Compare::kEq), b.zeros(b.type(m)), m);
  Value e = b.unary("exponential", b.binary("subtract", x, b.broadcast_in_dim(safe, d, {0})));
  return b.binary("add", b.unary("log", reduce(b, e, {1}, ReduceKind::kSum)), safe);
}

// x [N, L] moved k places towards higher (k > 0) or lower (k < 0) s, `fill` entering.
Value shift(Builder& b, Value x, int64_t k, Value fill) {
  auto d = b.dims(x);
  int64_t n = d[0], l = d[1], a = std::min<int64_t>(std::abs(k), l);
  if (a == 0) return x;
  Value pad = b.splat(fill, {n, a});
  if (a == l) return pad;
  if (k > 0) return b.concatenate({pad, b.slice(x, {0, 0}, {n, l - a}, {1, 1})}, 1);
  return b.concatenate({b.slice(x, {0, a}, {n, l}, {1, 1}), pad}, 1);
}

// What forward and backward share about one call.
struct Ctc {
  int64_t T = 0, N = 0, C = 0, L = 0;
  int64_t steps = 0;  // time steps to run: max(input_lengths) when static, else T
  ElementType t{};
  Value lp;      // [T, N, C] in the compute type
  Value il, tl;  // s64 [N]
  Value labels;  // s64 [N, L]: l'_s (blank where s is past the target)
  Value valid;   // i1 [N, L]: s < 2 tl + 1
  Value skip;    // i1 [N, L]: s can be reached from s - 2 (l'_s != l'_{s-2})
  Value lpe;     // [T, N, L]: lp at the extended labels
};

std::string dims_str(const std::vector<int64_t>& d) { return c10::str(c10::IntArrayRef(d)); }

// Reads and checks the arguments at positions lp_i.. (log_probs, targets,
// input_lengths, target_lengths) as CPU torch checks them. `width` is the
// log_alpha width the backward receives (0 in the forward).
}  // namespace

void check_ctc_lengths(int64_t T, int64_t N, const std::vector<int64_t>& target_dims,
                       const std::vector<int64_t>& il, const std::vector<int64_t>& tl) {
  const char* where = " (while checking arguments for ctc_loss_allocate_outputs)";
  TORCH_CHECK(static_cast<int64_t>(il.size()) == N, "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(tl.size()) == N, "target_lengths must be of size batch_size");
  for (int64_t v : il) {
    TORCH_CHECK(v >= 0, "Expected input_lengths to have value at least 0, but got value ", v, where);
    TORCH_CHECK(v <= T, "Expected input_lengths to have value at most ", T, ", but got value ", v, where);
  }
  for (int64_t v : tl) {
    TORCH_CHECK(v >= 0, "Expected target_lengths to have value at least 0, but got value ", v, where);
  }
  if (tl.empty()) return;
  int64_t longest = *std::max_element(tl.begin(), tl.end());
  int64_t total = std::accumulate(tl.begin(), tl.end(), int64_t{0});
  if (target_dims.size() == 2) {
    TORCH_CHECK(target_dims[1] >= longest, "Expected tensor to have size at least ", longest,
                " at dimension 1, but got size ", target_dims[1], " for argument #2 'targets'", where);
  } else if (target_dims.size() == 1) {
    TORCH_CHECK(target_dims[0] == total, "Expected tensor to have size ", total, " at dimension 0, but got size ",
                target_dims[0], " for argument #2 'targets'", where);
  }
}

namespace {

Ctc setup(LoweringContext& ctx, size_t lp_i, bool tensor_lengths, int64_t blank, int64_t width) {
  Builder& b = ctx.b;
  const char* where = " (while checking arguments for ctc_loss_allocate_outputs)";
  c10::ScalarType type = ctx.dtype(lp_i);
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble,
                              "\"ctc_loss\" not implemented for '", c10::toString(type), "'");
  Ctc c;
  c.t = et(type);
  c.lp = ctx.tensor(lp_i);
  auto d = b.dims(c.lp);
  TORCH_CHECK(d.size() == 3, "Expected 3-dimensional tensor, but got ", d.size(),
              "-dimensional tensor for argument #1 'log_probs'", where);
  c.T = d[0], c.N = d[1], c.C = d[2];
  TORCH_CHECK(c.T * c.N * c.C > 0, "log_probs tensor must not be empty");
  TORCH_CHECK(blank >= 0 && blank < c.C, "blank must be in label range");
  c10::ScalarType tt = ctx.dtype(lp_i + 1);
  TORCH_CHECK(tt == at::kLong || tt == at::kInt,
              "Expected tensor for argument #2 'targets' to have one of the following scalar types: "
              "Long, Int; but got ", c10::toString(tt), " instead", where);
  Value targets = b.convert(ctx.tensor(lp_i + 1), kI64);
  auto td = b.dims(targets);
  TORCH_CHECK(td.size() == 1 || td.size() == 2, "Expected 1 to 2 dimensions, but got ", td.size(),
              "-dimensional tensor for argument #2 'targets'", where);
  bool padded = td.size() == 2;
  int64_t S = padded ? td[1] : td[0];  // longest target the layout can hold
  if (padded) {
    TORCH_CHECK(td[0] == c.N, "Expected tensor to have size ", c.N, " at dimension 0, but got size ",
                td[0], " for argument #2 'targets'", where);
  }
  int64_t M = padded ? td[0] * td[1] : td[0];
  int64_t longest = S;  // bounds the target lengths
  if (!tensor_lengths) {
    std::vector<int64_t> il = ctx.int_list(lp_i + 2), tl = ctx.int_list(lp_i + 3);
    check_ctc_lengths(c.T, c.N, td, il, tl);
    longest = *std::max_element(tl.begin(), tl.end());
    c.steps = *std::max_element(il.begin(), il.end());
    c.il = int_vector(b, il);
    c.tl = int_vector(b, tl);
    if (width > 0) {
      TORCH_CHECK(width >= 2 * longest + 1, "ctc_loss_backward: log_alpha has ", width,
                  " extended positions, fewer than 2 * max(target_lengths) + 1 = ", 2 * longest + 1);
    }
  } else {
    const char* names[] = {"input_lengths", "target_lengths"};
    Value lens[2];
    for (int i = 0; i < 2; ++i) {
      c10::ScalarType lt = ctx.dtype(lp_i + 2 + i);
      TORCH_CHECK(c10::isIntegralType(lt, /*includeBool=*/false), names[i], " must be integral");
      Value v = ctx.tensor(lp_i + 2 + i);
      TORCH_CHECK(b.type(v).numel() == c.N, names[i], " must be of size batch_size");
      lens[i] = b.convert(b.reshape(v, {c.N}), kI64);
    }
    c.il = lens[0], c.tl = lens[1];
    c.steps = c.T;
    auto all = [&](Value ok) { return reduce(b, ok, {0}, ReduceKind::kAnd); };
    Value zero = full_int(b, 0, {c.N});
    ctx.require(all(b.binary("and", b.compare(c.il, zero, Compare::kGe),
                             b.compare(c.il, full_int(b, c.T, {c.N}), Compare::kLe))),
                c10::str("Expected input_lengths to have values in [0, ", c.T, "]", where), false);
    ctx.require(all(b.compare(c.tl, zero, Compare::kGe)),
                c10::str("Expected target_lengths to have value at least 0", where), false);
    if (padded) {
      ctx.require(all(b.compare(c.tl, full_int(b, S, {c.N}), Compare::kLe)),
                  c10::str("Expected tensor to have size at least max(target_lengths) at dimension 1, "
                           "but got size ", S, " for argument #2 'targets'", where), false);
    } else {
      Value total = reduce(b, c.tl, {0}, ReduceKind::kSum);
      ctx.require(b.compare(total, b.constant_int(M, kI64), Compare::kEq),
                  c10::str("Expected tensor to have size sum(target_lengths) at dimension 0, but got "
                           "size ", M, " for argument #2 'targets'", where), false);
    }
    if (width > 0) {
      ctx.require(all(b.compare(b.binary("add", b.binary("add", c.tl, c.tl), full_int(b, 1, {c.N})),
                                full_int(b, width, {c.N}), Compare::kLe)),
                  c10::str("ctc_loss_backward: log_alpha has ", width,
                           " extended positions, fewer than 2 * max(target_lengths) + 1"), false);
    }
  }
  c.L = width > 0 ? width : 2 * longest + 1;
  const std::vector<int64_t> nl = {c.N, c.L};

  // Extended labels: position s = 2k + 1 holds target k of the sample.
  Value s = b.iota(TensorType{kI64, nl}, 1);
  Value k = b.binary("divide", b.binary("subtract", s, full_int(b, 1, nl)), full_int(b, 2, nl));
  Value tl2 = b.broadcast_in_dim(c.tl, nl, {0});
  Value odd = b.compare(b.binary("remainder", s, full_int(b, 2, nl)), full_int(b, 1, nl), Compare::kEq);
  Value is_label = b.binary("and", odd, b.compare(k, tl2, Compare::kLt));
  Value blanks = full_int(b, blank, nl);
  if (M == 0) {
    c.labels = blanks;
  } else {
    Value start;  // where each sample's targets begin in the flattened targets
    if (padded) {
      start = b.binary("multiply", b.iota(TensorType{kI64, {c.N}}, 0), full_int(b, S, {c.N}));
    } else {  // exclusive cumulative sum of the target lengths
      const std::vector<int64_t> nn = {c.N, c.N};
      Value rows = b.iota(TensorType{kI64, nn}, 0), cols = b.iota(TensorType{kI64, nn}, 1);
      Value before = b.select(b.compare(cols, rows, Compare::kLt), b.broadcast_in_dim(c.tl, nn, {1}),
                              full_int(b, 0, nn));
      start = reduce(b, before, {1}, ReduceKind::kSum);
    }
    Value pos = b.clamp(b.constant_int(0, kI64), b.binary("add", b.broadcast_in_dim(start, nl, {0}), k),
                        b.constant_int(M - 1, kI64));
    Value flat = b.reshape(targets, {M});
    Builder::GatherDims g{{}, {0}, {0}, 2};
    Value picked = b.gather(flat, b.reshape(pos, {c.N, c.L, 1}), g, {1}, nl);
    c.labels = b.select(is_label, picked, blanks);
    Value in_range = b.binary("and", b.compare(picked, full_int(b, 0, nl), Compare::kGe),
                              b.compare(picked, full_int(b, c.C, nl), Compare::kLt));
    ctx.require(reduce(b, b.binary("or", in_range, b.unary("not", is_label)), {0, 1}, ReduceKind::kAnd),
                c10::str("ctc_loss: targets must be class indices in [0, ", c.C, ")"), false);
  }
  c.valid = b.compare(s, b.binary("add", b.binary("add", tl2, tl2), full_int(b, 1, nl)), Compare::kLt);
  Value back2 = shift(b, c.labels, 2, b.constant_int(blank, kI64));
  c.skip = b.binary("and", b.binary("and", odd, b.compare(s, full_int(b, 2, nl), Compare::kGe)),
                    b.compare(c.labels, back2, Compare::kNe));
  c.skip = b.binary("and", c.skip, c.valid);

  // lp[t, n, l'[n, s]] for all t: one gather of T-long columns.
  Value batch = b.iota(TensorType{kI64, {c.N, c.L, 1}}, 0);
  Value cls = b.clamp(b.constant_int(0, kI64), b.reshape(c.labels, {c.N, c.L, 1}),
                      b.constant_int(c.C - 1, kI64));
  Builder::GatherDims g{{0}, {1, 2}, {1, 2}, 2};
  c.lpe = b.gather(c.lp, b.concatenate({batch, cls}, 2), g, {c.T, 1, 1}, {c.T, c.N, c.L});
  return c;
}

// i1 [N, L]: t < il per sample, t a 0-d s64.
Value live_at(Builder& b, Value t, Value il, const std::vector<int64_t>& nl) {
  return b.compare(b.splat(t, nl), b.broadcast_in_dim(il, nl, {0}), Compare::kLt);
}

// The state before the first step: log 1 at position `at` (s64 [N]), log 0 elsewhere.
Value start_state(Builder& b, const Ctc& c, Value at) {
  std::vector<int64_t> nl = {c.N, c.L};
  Value s = b.iota(TensorType{kI64, nl}, 1);
  return b.select(b.compare(s, b.broadcast_in_dim(at, nl, {0}), Compare::kEq), full(b, 0, c.t, nl),
                  full(b, -INFINITY, c.t, nl));
}

// Returns (nll [N], log_alpha [N, T, L]).
std::vector<Value> forward(Builder& b, const Ctc& c) {
  const std::vector<int64_t> nl = {c.N, c.L};
  Value init = start_state(b, c, full_int(b, 0, {c.N}));
  Value acc = full(b, -INFINITY, c.t, {c.T, c.N, c.L});
  auto out = for_range(b, c.steps, {init, acc, c.lpe, c.il, c.valid, c.skip},
                       [&](Builder& q, Value t, const std::vector<Value>& v) {
    Value alpha = v[0], lpe = v[2], il = v[3], valid = v[4], skip = v[5];
    Value zero = q.constant_int(0, kI64);
    Value row = q.reshape(q.dynamic_slice(lpe, {t, zero, zero}, {1, c.N, c.L}), nl);
    Value ninf = q.constant(-INFINITY, c.t);
    Value a2 = q.select(skip, shift(q, alpha, 2, ninf), q.splat(ninf, nl));
    Value next = q.binary("add", row, logsumexp(q, {alpha, shift(q, alpha, 1, ninf), a2}));
    Value live = live_at(q, t, il, nl);
    Value store = q.select(q.binary("and", live, valid), next, q.splat(ninf, nl));
    Value acc1 = q.dynamic_update_slice(v[1], q.reshape(store, {1, c.N, c.L}), {t, zero, zero});
    // Past its input length a sample keeps alpha at its last step.
    return std::vector<Value>{q.select(live, store, alpha), acc1, lpe, il, valid, skip};
  });
  // p(l | x) = alpha[il - 1, 2 tl] + alpha[il - 1, 2 tl - 1].
  Value s = b.iota(TensorType{kI64, nl}, 1);
  Value end = b.broadcast_in_dim(b.binary("add", c.tl, c.tl), nl, {0});
  Value last = b.binary("or", b.compare(s, end, Compare::kEq),
                        b.compare(b.binary("add", s, full_int(b, 1, nl)), end, Compare::kEq));
  Value final_alpha = b.select(last, out[0], full(b, -INFINITY, c.t, nl));
  Value nll = b.unary("negate", logsumexp_rows(b, final_alpha));
  return {nll, b.transpose(out[1], {1, 0, 2})};
}

// The gradient w.r.t. log_probs [T, N, C] from the incoming grad [N], the
// forward's nll [N] and log_alpha [N, T, L].
Value backward(Builder& b, const Ctc& c, Value grad, Value nll, Value log_alpha, bool zero_infinity) {
  const std::vector<int64_t> nl = {c.N, c.L}, tnl = {c.T, c.N, c.L}, tnc = {c.T, c.N, c.C};
  Value end = start_state(b, c, b.binary("add", c.tl, c.tl));  // beta's virtual step il
  Value skip_from = shift(b, c.skip, -2, b.constant_bool(false));  // s + 2 reachable from s
  Value acc = full(b, -INFINITY, c.t, tnl);
  auto out = for_range(b, c.steps, {end, acc, c.lpe, c.il, c.valid, skip_from, end},
                       [&](Builder& q, Value i, const std::vector<Value>& v) {
    Value beta = v[0], lpe = v[2], il = v[3], valid = v[4], skip = v[5], fin = v[6];
    Value t = q.binary("subtract", q.constant_int(c.steps - 1, kI64), i);
    Value zero = q.constant_int(0, kI64);
    Value ninf = q.constant(-INFINITY, c.t);
    Value row = q.reshape(q.dynamic_slice(lpe, {t, zero, zero}, {1, c.N, c.L}), nl);
    Value t1 = q.binary("add", t, q.constant_int(1, kI64));
    Value after = q.select(live_at(q, t1, il, nl), beta, fin);
    Value b2 = q.select(skip, shift(q, after, -2, ninf), q.splat(ninf, nl));
    Value next = q.binary("add", row, logsumexp(q, {after, shift(q, after, -1, ninf), b2}));
    Value store = q.select(q.binary("and", live_at(q, t, il, nl), valid), next, q.splat(ninf, nl));
    Value acc1 = q.dynamic_update_slice(v[1], q.reshape(store, {1, c.N, c.L}), {t, zero, zero});
    return std::vector<Value>{store, acc1, lpe, il, valid, skip, fin};
  });
  Value beta = out[1];
  // alpha is read only where it is defined (t < il, s < 2 tl + 1).
  Value alpha = b.transpose(b.convert(log_alpha, c.t), {1, 0, 2});
  Value tidx = b.iota(TensorType{kI64, tnl}, 0);
  Value defined = b.binary("and", b.compare(tidx, b.broadcast_in_dim(c.il, tnl, {1}), Compare::kLt),
                           b.broadcast_in_dim(c.valid, tnl, {1, 2}));
  Value ninf = full(b, -INFINITY, c.t, tnl);
  Value ab = b.select(defined, b.binary("add", alpha, beta), ninf);
  Value nll_t = b.convert(nll, c.t);
  // Occupation probability of each (t, s): exp(alpha + beta - lp + nll), 0 where alpha + beta = -inf.
  Value occ = b.unary("exponential", b.binary("add", b.binary("subtract", ab, c.lpe),
                                              b.broadcast_in_dim(nll_t, tnl, {1})));
  occ = b.select(b.compare(ab, ninf, Compare::kEq), b.zeros(b.type(ab)), occ);
  Value classes = b.iota(TensorType{kI64, {c.N, c.L, c.C}}, 2);
  Value onehot = b.convert(
      b.compare(classes, b.broadcast_in_dim(c.labels, {c.N, c.L, c.C}, {0, 1}), Compare::kEq), c.t);
  Value per_class = b.dot_general(occ, onehot, {1}, {0}, {2}, {1}, c.t);  // [N, T, C]
  Value g = b.binary("subtract", b.unary("exponential", c.lp), b.transpose(per_class, {1, 0, 2}));
  Value gout = b.convert(grad, c.t);
  gout = b.type(gout).rank() == 0 ? b.splat(gout, {c.N}) : b.reshape(gout, {c.N});
  g = b.binary("multiply", g, b.broadcast_in_dim(gout, tnc, {1}));
  // An impossible alignment (nll = inf): NaN as on CPU, or 0 with zero_infinity.
  Value inf = b.compare(nll_t, full(b, INFINITY, c.t, {c.N}), Compare::kEq);
  g = b.select(b.broadcast_in_dim(inf, tnc, {1}), full(b, zero_infinity ? 0.0 : NAN, c.t, tnc), g);
  Value tc = b.iota(TensorType{kI64, tnc}, 0);
  return b.select(b.compare(tc, b.broadcast_in_dim(c.il, tnc, {1}), Compare::kLt), g,
                  b.zeros(TensorType{c.t, tnc}));
}

LoweringRegistrar registrar([] {
  // _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
  //   -> (neg_log_likelihood, log_alpha); zero_infinity only matters for the backward.
  auto fwd = [](bool tensor_lengths) {
    return [tensor_lengths](LoweringContext& ctx) {
      Ctc c = setup(ctx, 0, tensor_lengths, ctx.int_arg(4), 0);
      return forward(ctx.b, c);
    };
  };
  // int[] lengths: compiled graphs only. Eager sends them to the device as
  // data (csrc/backend/ctc_lengths.cc), so new lengths reuse the program.
  register_graph_lowering("aten::_ctc_loss", fwd(false), {"aten::_ctc_loss.out"});
  register_lowering("aten::_ctc_loss.Tensor", fwd(true), {"aten::_ctc_loss.Tensor_out"});
  // _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
  //                    neg_log_likelihood, log_alpha, blank, zero_infinity)
  auto bwd = [](bool tensor_lengths) {
    return [tensor_lengths](LoweringContext& ctx) {
      Builder& b = ctx.b;
      auto la = b.dims(ctx.tensor(6));
      auto lp = b.dims(ctx.tensor(1));
      TORCH_CHECK(la.size() == 3 && lp.size() == 3 && la[0] == lp[1] && la[1] == lp[0] && la[2] > 0,
                  "ctc_loss_backward: log_alpha of shape ", dims_str(la),
                  " does not match log_probs of shape ", dims_str(lp));
      TORCH_CHECK(b.type(ctx.tensor(0)).numel() == lp[1] && b.type(ctx.tensor(5)).numel() == lp[1],
                  "ctc_loss_backward: grad and neg_log_likelihood must have batch_size elements");
      Ctc c = setup(ctx, 1, tensor_lengths, ctx.int_arg(7), la[2]);
      Value nll = b.reshape(ctx.tensor(5), {c.N});
      Value g = backward(b, c, ctx.tensor(0), nll, ctx.tensor(6), ctx.bool_arg(8));
      return std::vector<Value>{convert(b, g, ctx.dtype(1))};
    };
  };
  register_graph_lowering("aten::_ctc_loss_backward", bwd(false), {"aten::_ctc_loss_backward.out"});
  register_lowering("aten::_ctc_loss_backward.Tensor", bwd(true));
});

}  // namespace
}  // namespace torch_pjrt::ops
