// QR through Householder reflections, as LAPACK's unblocked geqr2 computes
// it (so the packed result and tau equal the CPU's up to rounding): geqrf,
// linalg.householder_product (orgqr), ormqr and linalg.qr in its three
// modes. Column j's reflector H_j = I - tau_j v_j v_j^H has v_j = 1 at row
// j, zero above and the packed entries below; each step is one iteration of
// a stablehlo.while over masked whole-matrix updates, vectorised over the
// batch. Real and complex.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/householder.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;
Value s64(Builder& b, int64_t v) { return b.constant_int(v, ElementType::kS64); }

void check_dtype(c10::ScalarType type, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                                  type == at::kComplexDouble,
                              "\"", kernel, "\" not implemented for '", c10::toString(type), "'");
}

Value scalar_like(Builder& b, double v, ElementType t, const std::vector<int64_t>& dims) {
  return b.splat(b.constant(v, t), dims);
}

// Entry j of the last dim of x (batch + [k]), as batch.
Value entry(Builder& b, Value x, Value j) {
  auto d = b.dims(x);
  int64_t r = static_cast<int64_t>(d.size());
  return pick(b, b.compare(index_of(b, d, r - 1), b.splat(j, d), Compare::kEq), x, r - 1);
}

// Reflector j of packed `v` (batch + [m, k]): 1 at row j, zero above, v's
// column j below; batch + [m].
Value reflector(Builder& b, Value v, Value j) {
  auto d = b.dims(v);
  int64_t r = static_cast<int64_t>(d.size());
  Value col = pick(b, b.compare(index_of(b, d, r - 1), b.splat(j, d), Compare::kEq), v, r - 1);
  auto cd = b.dims(col);
  Value row = index_of(b, cd, r - 2), J = b.splat(j, cd);
  ElementType t = b.element_type(v);
  return b.select(b.compare(row, J, Compare::kGt), col,
                  b.select(b.compare(row, J, Compare::kEq), scalar_like(b, 1.0, t, cd), b.zeros(b.type(col))));
}

// C <- (I - coef v v^H) C (left) or C (I - coef v v^H) (right); v is
// batch + [m], coef batch.
Value reflect(Builder& b, Value c, Value v, Value coef, bool left) {
  auto d = b.dims(c);
  int64_t r = static_cast<int64_t>(d.size());
  std::vector<int64_t> batch = all_dims(r - 2);
  auto vmap = batch;
  vmap.push_back(left ? r - 2 : r - 1);
  Value vd = b.broadcast_in_dim(v, d, vmap);
  if (left) {
    // w = v^H C (batch + [n]); C -= coef v w
    Value w = reduce(b, b.binary("multiply", conj(b, vd), c), {r - 2}, ReduceKind::kSum);
    Value scaled = b.binary("multiply", w, b.broadcast_in_dim(coef, b.dims(w), batch));
    auto wmap = batch;
    wmap.push_back(r - 1);
    return b.binary("subtract", c, b.binary("multiply", vd, b.broadcast_in_dim(scaled, d, wmap)));
  }
  // w = C v (batch + [m]); C -= coef w v^H
  Value w = reduce(b, b.binary("multiply", c, vd), {r - 1}, ReduceKind::kSum);
  Value scaled = b.binary("multiply", w, b.broadcast_in_dim(coef, b.dims(w), batch));
  auto wmap = batch;
  wmap.push_back(r - 2);
  return b.binary("subtract", c, b.binary("multiply", b.broadcast_in_dim(scaled, d, wmap), conj(b, vd)));
}

}  // namespace

Packed geqrf(Builder& b, Value a) {
  auto dims = b.dims(a);
  int64_t r = static_cast<int64_t>(dims.size()), m = dims[r - 2], n = dims[r - 1], k = std::min(m, n);
  std::vector<int64_t> batch(dims.begin(), dims.end() - 2);
  ElementType t = b.element_type(a);
  Value tau = b.zeros(TensorType{t, with(batch, {k})});
  auto out = for_range(b, k, {a, tau}, [&](Builder& c, Value j, const std::vector<Value>& carried) {
    Value A = carried[0], T = carried[1];
    ElementType rt = real_type(c, A);
    std::vector<int64_t> bm = with(batch, {m});
    Value col = pick(c, c.compare(index_of(c, dims, r - 1), c.splat(j, dims), Compare::kEq), A, r - 1);
    Value rows = index_of(c, bm, r - 2), J = c.splat(j, bm);
    Value alpha = pick(c, c.compare(rows, J, Compare::kEq), col, r - 2);  // batch
    Value x = c.select(c.compare(rows, J, Compare::kGt), col, c.zeros(c.type(col)));
    Value ax = modulus(c, x);
    Value xnorm2 = reduce(c, c.binary("multiply", ax, ax), {r - 2}, ReduceKind::kSum);
    Value are = hlo::is_complex(t) ? c.real(alpha) : alpha;
    Value aim = hlo::is_complex(t) ? c.imag(alpha) : c.zeros(c.type(alpha));
    Value zero = c.zeros(c.type(xnorm2));
    Value trivial = c.binary("and", c.compare(xnorm2, zero, Compare::kEq), c.compare(aim, zero, Compare::kEq));
    Value norm = c.unary("sqrt", c.binary("add", c.binary("add", c.binary("multiply", are, are),
                                                           c.binary("multiply", aim, aim)), xnorm2));
    // beta = -sign(Re alpha) * ||(alpha, x)||, with sign(0) = +.
    Value neg = c.compare(are, zero, Compare::kLt);
    Value beta = c.select(neg, norm, c.unary("negate", norm));
    Value beta_t = hlo::is_complex(t) ? c.complex(beta, zero) : beta;
    Value one = hlo::is_complex(t) ? c.complex(scalar_like(c, 1.0, rt, c.dims(beta)), zero)
                                   : scalar_like(c, 1.0, t, c.dims(beta));
    // Where the reflector is the identity, divide by 1 instead (unused).
    Value safe_beta = c.select(trivial, one, beta_t);
    Value denom = c.select(trivial, one, c.binary("subtract", alpha, beta_t));
    Value tau_j = c.select(trivial, c.zeros(c.type(alpha)),
                           c.binary("divide", c.binary("subtract", beta_t, alpha), safe_beta));
    Value scale = c.binary("divide", one, denom);
    std::vector<int64_t> bmap = all_dims(r - 2);
    Value v_below = c.binary("multiply", x, c.broadcast_in_dim(c.select(trivial, one, scale), bm, bmap));
    Value diag = c.select(trivial, alpha, beta_t);
    Value new_col = c.select(c.compare(rows, J, Compare::kGt), v_below,
                             c.select(c.compare(rows, J, Compare::kEq), c.broadcast_in_dim(diag, bm, bmap), col));
    Value v = c.select(c.compare(rows, J, Compare::kGt), v_below,
                       c.select(c.compare(rows, J, Compare::kEq), c.broadcast_in_dim(one, bm, bmap),
                                c.zeros(c.type(col))));
    // The trailing columns take H_j^H = I - conj(tau) v v^H from the left.
    Value updated = reflect(c, A, v, conj(c, tau_j), /*left=*/true);
    Value cols = index_of(c, dims, r - 1), Jd = c.splat(j, dims);
    auto cmap = bmap;
    cmap.push_back(r - 2);
    Value A1 = c.select(c.compare(cols, Jd, Compare::kGt), updated,
                        c.select(c.compare(cols, Jd, Compare::kEq), c.broadcast_in_dim(new_col, dims, cmap), A));
    auto td = c.dims(T);
    auto tmap = bmap;
    Value T1 = c.select(c.compare(index_of(c, td, r - 2), c.splat(j, td), Compare::kEq),
                        c.broadcast_in_dim(tau_j, td, tmap), T);
    return std::vector<Value>{A1, T1};
  });
  return {out[0], out[1]};
}

// Applies Q = H_0 H_1 ... H_{k-1} (reflectors in v: batch + [m, >= k],
// tau: batch + [k]) to c: Q C, Q^H C (left) or C Q, C Q^H (right).
Value apply_q(Builder& b, Value v, Value tau, Value c, bool left, bool adjoint) {
  int64_t k = b.dims(tau).back();
  // Q C and C Q^H apply H_{k-1} first; Q^H C and C Q apply H_0 first.
  bool last_first = left != adjoint;
  // The loop body sees only what it carries: v and tau ride along.
  auto out = for_range(b, k, {c, v, tau}, [&](Builder& q, Value i, const std::vector<Value>& cur) {
    Value j = last_first ? q.binary("subtract", s64(q, k - 1), i) : i;
    Value coef = entry(q, cur[2], j);
    if (adjoint) coef = conj(q, coef);
    return std::vector<Value>{reflect(q, cur[0], reflector(q, cur[1], j), coef, left), cur[1], cur[2]};
  });
  return out[0];
}

// The leading `rows` x `cols` block of each matrix.
Value block(Builder& b, Value x, int64_t rows, int64_t cols) {
  auto d = b.dims(x);
  int64_t r = static_cast<int64_t>(d.size());
  std::vector<int64_t> zero(r, 0), one(r, 1), lim = d;
  lim[r - 2] = rows;
  lim[r - 1] = cols;
  return b.slice(x, zero, lim, one);
}

namespace {

Value upper_triangle(Builder& b, Value x) {
  auto d = b.dims(x);
  int64_t r = static_cast<int64_t>(d.size());
  return b.select(b.compare(index_of(b, d, r - 2), index_of(b, d, r - 1), Compare::kLe), x, b.zeros(b.type(x)));
}

void check_same_batch(Builder& b, Value x, Value y, int64_t x_tail, int64_t y_tail, const char* op,
                      const char* what) {
  TORCH_CHECK(batch_of(b, x, x_tail) == batch_of(b, y, y_tail), op, ": Expected batch dimensions of ", what,
              " to be equal to input.shape[:-2], but got ", c10::IntArrayRef(batch_of(b, y, y_tail)));
}

LoweringRegistrar registrar([] {
  register_lowering("aten::geqrf", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_dtype(ctx.dtype(0), "geqrf_cpu");
    TORCH_CHECK(b.type(ctx.tensor(0)).rank() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
    Packed p = geqrf(b, ctx.tensor(0));
    return std::vector<Value>{p.a, p.tau};
  }, {"aten::geqrf.a"});

  // linalg_householder_product(input, tau): the first n columns of
  // H_0 ... H_{k-1}.
  register_lowering("aten::linalg_householder_product", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    const char* op = "torch.linalg.householder_product";
    Value v = ctx.tensor(0), tau = ctx.tensor(1);
    auto vd = b.dims(v), td = b.dims(tau);
    TORCH_CHECK(vd.size() >= 2, op, ": input must have at least 2 dimensions.");
    TORCH_CHECK(vd[vd.size() - 2] >= vd.back(), op,
                ": input.shape[-2] must be greater than or equal to input.shape[-1]");
    TORCH_CHECK(!td.empty() && vd.back() >= td.back(), op,
                ": input.shape[-1] must be greater than or equal to tau.shape[-1]");
    TORCH_CHECK(td.size() + 1 == vd.size(), op, ": Expected tau to have one dimension less than input, but "
                "got tau.ndim equal to ", td.size(), " and input.ndim is equal to ", vd.size());
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), op, ": tau dtype ", ctx.dtype(1), " does not match input dtype ",
                ctx.dtype(0));
    check_same_batch(b, v, tau, 2, 1, op, "tau");
    check_dtype(ctx.dtype(0), "orgqr_cpu");
    int64_t m = vd[vd.size() - 2], n = vd.back();
    Value start = block(b, eye(b, b.element_type(v), with(batch_of(b, v, 2), {m, m})), m, n);
    return std::vector<Value>{apply_q(b, v, tau, start, /*left=*/true, /*adjoint=*/false)};
  }, {"aten::linalg_householder_product.out"});

  // ormqr(input, tau, other, left, transpose): op(Q) other or other op(Q),
  // with transpose meaning the conjugate transpose.
  register_lowering("aten::ormqr", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    const char* op = "torch.ormqr";
    Value v = ctx.tensor(0), tau = ctx.tensor(1), other = ctx.tensor(2);
    bool left = ctx.bool_arg(3), transpose = ctx.bool_arg(4);
    auto vd = b.dims(v), td = b.dims(tau), od = b.dims(other);
    TORCH_CHECK(vd.size() >= 2, op, ": input must have at least 2 dimensions.");
    TORCH_CHECK(od.size() >= 2, op, ": other must have at least 2 dimensions.");
    int64_t side = left ? od[od.size() - 2] : od.back();
    TORCH_CHECK(side == vd[vd.size() - 2], op, left ? ": other.shape[-2]" : ": other.shape[-1]",
                " must be equal to input.shape[-2]");
    TORCH_CHECK(!td.empty() && td.back() <= std::min(side, vd.back()), op,
                ": tau.shape[-1] must be less than or equal to min(other.shape[", left ? -2 : -1,
                "], input.shape[-1])");
    TORCH_CHECK(td.size() + 1 == vd.size(), op, ": Expected tau to have one dimension less than input, but "
                "got tau.ndim equal to ", td.size(), " and input.ndim is equal to ", vd.size());
    TORCH_CHECK(vd.size() == od.size(), op, ": Expected other to have the same number of dimensions as input, "
                "but got other.ndim equal to ", od.size(), " and input.ndim is equal to ", vd.size());
    check_same_batch(b, v, tau, 2, 1, op, "tau");
    check_same_batch(b, v, other, 2, 2, op, "other");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1) && ctx.dtype(0) == ctx.dtype(2), op,
                ": Expected input, tau and other to have the same dtype, but got ", ctx.dtype(0), ", ",
                ctx.dtype(1), " and ", ctx.dtype(2));
    check_dtype(ctx.dtype(0), "ormqr_cpu");
    return std::vector<Value>{apply_q(b, v, tau, other, left, transpose)};
  }, {"aten::ormqr.out"});

  // linalg_qr(A, mode) -> (Q, R)
  register_lowering("aten::linalg_qr", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    std::string mode = ctx.ivalue(1).toStringRef();
    TORCH_CHECK(mode == "reduced" || mode == "r" || mode == "complete", "qr received unrecognized mode '", mode,
                "' but expected one of 'reduced' (default), 'r', or 'complete'");
    Value a = ctx.tensor(0);
    auto d = b.dims(a);
    TORCH_CHECK(d.size() >= 2, "linalg.qr: The input tensor A must have at least 2 dimensions.");
    check_dtype(ctx.dtype(0), "geqrf_cpu");
    int64_t m = d[d.size() - 2], n = d.back(), k = std::min(m, n);
    Packed p = geqrf(b, a);
    bool complete = mode == "complete";
    Value R = upper_triangle(b, complete ? p.a : block(b, p.a, k, n));
    if (mode == "r") return std::vector<Value>{b.zeros(TensorType{b.element_type(a), {0}}), R};
    int64_t q_cols = complete ? m : k;
    Value start = block(b, eye(b, b.element_type(a), with(batch_of(b, a, 2), {m, m})), m, q_cols);
    Value Q = apply_q(b, block(b, p.a, m, k), p.tau, start, /*left=*/true, /*adjoint=*/false);
    return std::vector<Value>{Q, R};
  }, {"aten::linalg_qr.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
