// LU factorisation with partial pivoting, and what torch builds on it:
// linalg.lu_factor(_ex), lu_unpack, linalg.lu, linalg.lu_solve, linalg.inv,
// linalg.solve, det and slogdet. The factorisation is one stablehlo.while
// over the columns, as LAPACK's unblocked getf2: pick the largest |entry| at
// or below the diagonal, swap its row up, scale the column under the pivot
// and update the trailing block. Row picks and swaps are masked selects and
// one-entry sums, so they are exact. Solves go through the builder's
// triangular solves.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

void check_float(c10::ScalarType type, const char* op) {
  TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type), op,
              ": Expected a floating point or complex tensor as input. Got ", type);
  TORCH_CHECK(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                  type == at::kComplexDouble,
              op, ": Low precision dtypes not supported. Got ", type);
}

struct Lu {
  Value lu;      // L below the diagonal (unit diagonal implied), U on and above
  Value pivots;  // s32 batch + [k], 1-based, as LAPACK's
  Value perm;    // s64 batch + [m]: row i of lu is row perm[i] of the input
  Value info;    // s32 batch: first zero pivot (1-based), else 0
};

Lu factor(Builder& b, Value a) {
  auto dims = b.dims(a);
  int64_t r = static_cast<int64_t>(dims.size());
  int64_t m = dims[r - 2], n = dims[r - 1], k = std::min(m, n);
  std::vector<int64_t> batch(dims.begin(), dims.end() - 2);
  Value perm = b.iota(TensorType{ElementType::kS64, with(batch, {m})}, r - 2);
  Value pivots = b.zeros(TensorType{ElementType::kS32, with(batch, {k})});
  Value info = b.zeros(TensorType{ElementType::kS32, batch});
  if (k == 0) return {a, pivots, perm, info};
  Value start = b.constant_int(0, ElementType::kS64);
  auto out = b.while_loop(
      {start, a, perm, pivots, info},
      [k](Builder& c, const std::vector<Value>& v) {
        return std::vector<Value>{c.compare(v[0], c.constant_int(k, ElementType::kS64), hlo::Compare::kLt)};
      },
      [&](Builder& c, const std::vector<Value>& v) {
        Value j = v[0], A = v[1], P = v[2], piv = v[3], inf = v[4];
        ElementType t = c.element_type(A);
        auto sp = [&](Value s, const std::vector<int64_t>& to) { return c.splat(s, to); };
        std::vector<int64_t> bm = with(batch, {m}), bn = with(batch, {n});
        std::vector<int64_t> to_rows, to_cols;  // batch + [m] / batch + [n] into dims
        for (int64_t i = 0; i < r - 2; ++i) {
          to_rows.push_back(i);
          to_cols.push_back(i);
        }
        const std::vector<int64_t> batch_map = to_rows;  // batch dims only
        to_rows.push_back(r - 2);
        to_cols.push_back(r - 1);
        Value row = c.iota(TensorType{ElementType::kS64, dims}, r - 2);
        Value col = c.iota(TensorType{ElementType::kS64, dims}, r - 1);
        Value J = sp(j, dims);
        Value ri = c.iota(TensorType{ElementType::kS64, bm}, r - 2);
        // The pivot row: largest |A[i, j]| for i >= j, the first of equals.
        Value colj = pick(c, c.compare(col, J, hlo::Compare::kEq), A, r - 1);
        Value below = c.compare(ri, sp(j, bm), hlo::Compare::kGe);
        // |x| (|re| + |im| for complex, as LAPACK's icamax compares).
        Value mag = hlo::is_complex(t) ? c.binary("add", c.unary("abs", c.real(colj)), c.unary("abs", c.imag(colj)))
                                       : c.unary("abs", colj);
        ElementType mt = c.element_type(mag);
        mag = c.select(below, mag, c.splat(c.constant(-INFINITY, mt), bm));
        auto best = c.reduce({mag, ri}, {c.constant(-INFINITY, mt), c.constant_int(m, ElementType::kS64)},
                             {r - 2}, [](Builder& q, const std::vector<Value>& s) {
                               // s = (best value, best row, value, row)
                               Value better = q.binary("or", q.compare(s[2], s[0], hlo::Compare::kGt),
                                                       q.binary("and", q.compare(s[2], s[0], hlo::Compare::kEq),
                                                                q.compare(s[3], s[1], hlo::Compare::kLt)));
                               return std::vector<Value>{q.select(better, s[2], s[0]), q.select(better, s[3], s[1])};
                             });
        Value p = best[1];
        // All candidates NaN: keep row j.
        Value jb = c.splat(j, batch);
        p = c.select(c.compare(p, c.splat(c.constant_int(m, ElementType::kS64), batch), hlo::Compare::kLt), p, jb);
        p = c.select(c.compare(p, jb, hlo::Compare::kLt), jb, p);
        Value Pd = c.broadcast_in_dim(p, dims, batch_map);
        Value is_j = c.compare(row, J, hlo::Compare::kEq), is_p = c.compare(row, Pd, hlo::Compare::kEq);
        Value rowj = pick(c, is_j, A, r - 2), rowp = pick(c, is_p, A, r - 2);
        Value A1 = c.select(is_j, c.broadcast_in_dim(rowp, dims, to_cols),
                            c.select(is_p, c.broadcast_in_dim(rowj, dims, to_cols), A));
        Value pm = c.broadcast_in_dim(p, bm, batch_map);
        Value ri_j = c.compare(ri, sp(j, bm), hlo::Compare::kEq), ri_p = c.compare(ri, pm, hlo::Compare::kEq);
        Value permj = pick(c, ri_j, P, r - 2), permp = pick(c, ri_p, P, r - 2);
        Value P1 = c.select(ri_j, c.broadcast_in_dim(permp, bm, batch_map),
                            c.select(ri_p, c.broadcast_in_dim(permj, bm, batch_map), P));
        std::vector<int64_t> bk = with(batch, {k});
        Value ki = c.iota(TensorType{ElementType::kS64, bk}, r - 2);
        Value p1 = c.convert(c.binary("add", p, c.splat(c.constant_int(1, ElementType::kS64), batch)), ElementType::kS32);
        Value piv1 = c.select(c.compare(ki, sp(j, bk), hlo::Compare::kEq),
                              c.broadcast_in_dim(p1, bk, batch_map), piv);
        // Eliminate below the pivot (skipped for a zero pivot, as LAPACK's).
        Value ci = c.iota(TensorType{ElementType::kS64, bn}, r - 2);
        Value pivot = pick(c, c.compare(ci, sp(j, bn), hlo::Compare::kEq), rowp, r - 2);
        Value nonzero = c.compare(pivot, c.zeros(c.type(pivot)), hlo::Compare::kNe);
        Value j32 = c.convert(c.binary("add", j, c.constant_int(1, ElementType::kS64)), ElementType::kS32);
        Value inf1 = c.select(c.binary("and", c.unary("not", nonzero),
                                       c.compare(inf, c.zeros(c.type(inf)), hlo::Compare::kEq)),
                              c.splat(j32, batch), inf);
        Value colj1 = pick(c, c.compare(col, J, hlo::Compare::kEq), A1, r - 1);
        Value l = c.binary("divide", colj1, c.broadcast_in_dim(pivot, bm, batch_map));
        Value Ld = c.broadcast_in_dim(l, dims, to_rows);
        Value Ud = c.broadcast_in_dim(rowp, dims, to_cols);
        Value act = c.binary("and", c.compare(row, J, hlo::Compare::kGt),
                             c.broadcast_in_dim(nonzero, dims, batch_map));
        Value trailing = c.binary("and", act, c.compare(col, J, hlo::Compare::kGt));
        Value A2 = c.select(trailing, c.binary("subtract", A1, c.binary("multiply", Ld, Ud)), A1);
        Value A3 = c.select(c.binary("and", act, c.compare(col, J, hlo::Compare::kEq)), Ld, A2);
        Value j1 = c.binary("add", j, c.constant_int(1, ElementType::kS64));
        return std::vector<Value>{j1, A3, P1, piv1, inf1};
      });
  return {out[1], out[3], out[2], out[4]};
}

// The permutation matrix P (batch + [m, m]) with A = P L U, from `perm`.
Value permutation_matrix(Builder& b, Value perm, ElementType t) {
  auto pd = b.dims(perm);
  int64_t r = static_cast<int64_t>(pd.size()) + 1, m = pd.back();
  std::vector<int64_t> batch(pd.begin(), pd.end() - 1);
  auto dims = with(batch, {m, m});
  std::vector<int64_t> map;
  for (int64_t i = 0; i < r - 2; ++i) map.push_back(i);
  map.push_back(r - 1);  // perm[i] lands in column i
  Value cols = b.broadcast_in_dim(perm, dims, map);
  Value rows = b.iota(TensorType{ElementType::kS64, dims}, r - 2);
  return b.convert(b.compare(rows, cols, hlo::Compare::kEq), t);
}

// The row order from LAPACK pivots (swap k with pivots[k] - 1 in turn).
Value perm_from_pivots(Builder& b, Value pivots, int64_t m) {
  auto kd = b.dims(pivots);
  int64_t k = kd.back();
  std::vector<int64_t> batch(kd.begin(), kd.end() - 1);
  int64_t r = static_cast<int64_t>(batch.size()) + 2;
  auto bm = with(batch, {m});
  Value perm = b.iota(TensorType{ElementType::kS64, bm}, r - 2);
  if (k == 0 || m == 0) return perm;
  Value piv = b.convert(pivots, ElementType::kS64);
  auto out = b.while_loop(
      {b.constant_int(0, ElementType::kS64), perm, piv},
      [k](Builder& c, const std::vector<Value>& v) {
        return std::vector<Value>{c.compare(v[0], c.constant_int(k, ElementType::kS64), hlo::Compare::kLt)};
      },
      [&](Builder& c, const std::vector<Value>& v) {
        Value j = v[0], P = v[1], pv = v[2];
        std::vector<int64_t> batch_map = all_dims(r - 2);
        Value ki = c.iota(TensorType{ElementType::kS64, with(batch, {k})}, r - 2);
        Value p = pick(c, c.compare(ki, c.splat(j, c.dims(ki)), hlo::Compare::kEq), pv, r - 2);
        p = c.binary("subtract", p, c.splat(c.constant_int(1, ElementType::kS64), batch));
        Value ri = c.iota(TensorType{ElementType::kS64, bm}, r - 2);
        Value is_j = c.compare(ri, c.splat(j, bm), hlo::Compare::kEq);
        Value is_p = c.compare(ri, c.broadcast_in_dim(p, bm, batch_map), hlo::Compare::kEq);
        Value at_j = pick(c, is_j, P, r - 2), at_p = pick(c, is_p, P, r - 2);
        Value P1 = c.select(is_j, c.broadcast_in_dim(at_p, bm, batch_map),
                            c.select(is_p, c.broadcast_in_dim(at_j, bm, batch_map), P));
        return std::vector<Value>{c.binary("add", j, c.constant_int(1, ElementType::kS64)), P1, pv};
      });
  return out[1];
}

// L (unit lower, m x k) and U (upper, k x n) out of a packed factor.
std::pair<Value, Value> unpack(Builder& b, Value lu) {
  auto dims = b.dims(lu);
  int64_t r = static_cast<int64_t>(dims.size()), m = dims[r - 2], n = dims[r - 1], k = std::min(m, n);
  std::vector<int64_t> zero(r, 0), strides(r, 1);
  auto lim = dims;
  lim[r - 1] = k;
  Value left = b.slice(lu, zero, lim, strides);  // m x k
  lim = dims;
  lim[r - 2] = k;
  Value top = b.slice(lu, zero, lim, strides);  // k x n
  auto ld = b.dims(left), ud = b.dims(top);
  Value lr = b.iota(TensorType{ElementType::kS64, ld}, r - 2), lc = b.iota(TensorType{ElementType::kS64, ld}, r - 1);
  Value L = b.select(b.compare(lr, lc, hlo::Compare::kGt), left,
                     b.convert(b.compare(lr, lc, hlo::Compare::kEq), b.element_type(lu)));
  Value ur = b.iota(TensorType{ElementType::kS64, ud}, r - 2), uc = b.iota(TensorType{ElementType::kS64, ud}, r - 1);
  Value U = b.select(b.compare(ur, uc, hlo::Compare::kLe), top, b.zeros(b.type(top)));
  return {L, U};
}

// Solves A X = B (or A^T X = B, the plain transpose) from A's packed factor
// and row order; lu, perm and rhs already share their batch dims.
Value solve_with(Builder& b, Value lu, Value perm, Value rhs, bool adjoint) {
  auto [L, U] = unpack(b, lu);
  Value P = permutation_matrix(b, perm, b.element_type(lu));
  if (!adjoint) {
    Value y = batched_matmul(b, transpose_last(b, P), rhs);
    y = b.triangular_solve(L, y, true, true, true, false);
    return b.triangular_solve(U, y, true, false, false, false);
  }
  Value y = b.triangular_solve(U, rhs, true, false, false, true);
  y = b.triangular_solve(L, y, true, true, true, true);
  return batched_matmul(b, P, y);
}

Value square_input(LoweringContext& ctx, size_t arg, const char* op) {
  check_float(ctx.dtype(arg), op);
  Builder& b = ctx.b;
  Value a = ctx.tensor(arg);
  auto d = b.dims(a);
  TORCH_CHECK(d.size() >= 2, op, ": The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(d[d.size() - 2] == d.back(), op, ": A must be batches of square matrices, but they are ",
              d[d.size() - 2], " by ", d.back(), " matrices");
  return a;
}

// The pivot's sign flips: (-1)^(rows swapped), as the input's float type.
Value swap_sign(Builder& b, Value pivots) {
  auto kd = b.dims(pivots);
  int64_t r = static_cast<int64_t>(kd.size());
  Value own = b.binary("add", b.iota(TensorType{ElementType::kS32, kd}, r - 1),
                       b.splat(b.constant_int(1, ElementType::kS32), kd));
  Value swapped = b.convert(b.compare(pivots, own, hlo::Compare::kNe), ElementType::kS32);
  Value count = reduce(b, swapped, {r - 1}, ReduceKind::kSum);
  auto batch = b.dims(count);
  Value odd = b.compare(b.binary("remainder", count, b.splat(b.constant_int(2, ElementType::kS32), batch)),
                        b.zeros(b.type(count)), hlo::Compare::kNe);
  return odd;
}

// What det and slogdet factor: torch's CPU kernels return the LU of A^T
// for real A and of A itself for complex A, and det's backward solves with
// that factor, so it must be the same one.
Value det_factor_input(Builder& b, Value a) {
  return hlo::is_complex(b.element_type(a)) ? a : transpose_last(b, a);
}

// check_errors: every matrix of the batch factored without a zero pivot,
// raised at the next host wait as the CPU raises it at once.
void require_nonsingular(LoweringContext& ctx, Value info, const std::string& message) {
  Builder& b = ctx.b;
  Value worst = reduce(b, info, all_dims(b.type(info).rank()), ReduceKind::kMax);
  ctx.require(b.compare(worst, b.constant_int(0, ElementType::kS32), hlo::Compare::kEq), message,
              /*index_error=*/false);
}

LoweringRegistrar registrar([] {
  register_lowering("aten::linalg_lu_factor_ex", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_float(ctx.dtype(0), "torch.linalg.lu_factor_ex");
    TORCH_CHECK(b.type(ctx.tensor(0)).rank() >= 2,
                "torch.linalg.lu_factor: Expected tensor with 2 or more dimensions. Got size: ",
                c10::IntArrayRef(b.dims(ctx.tensor(0))), " instead");
    TORCH_CHECK(ctx.bool_arg(1), "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
    Lu f = factor(b, ctx.tensor(0));
    if (ctx.bool_arg(2)) require_nonsingular(ctx, f.info, "torch.linalg.lu_factor_ex: U is singular");
    return std::vector<Value>{f.lu, f.pivots, f.info};
  }, {"aten::linalg_lu_factor_ex.out"});

  // lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U)
  register_lowering("aten::lu_unpack", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value lu = ctx.tensor(0);
    auto d = b.dims(lu);
    TORCH_CHECK(d.size() >= 2, "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ",
                c10::IntArrayRef(d), " instead");
    TORCH_CHECK(ctx.dtype(1) == at::kInt, "torch.lu_unpack: LU_pivots is expected to be a contiguous "
                "tensor of torch.int32 dtype. Note: this function is intended to be used with the output "
                "produced by torch.linalg.lu_factor");
    int64_t m = d[d.size() - 2];
    bool data = ctx.bool_arg(2), pivs = ctx.bool_arg(3);
    auto [L, U] = unpack(b, lu);
    Value P = pivs ? permutation_matrix(b, perm_from_pivots(b, ctx.tensor(1), m), b.element_type(lu))
                   : b.zeros(TensorType{b.element_type(lu), {0}});
    if (!data) {
      L = b.zeros(TensorType{b.element_type(lu), {0}});
      U = L;
    }
    return std::vector<Value>{P, L, U};
  }, {"aten::lu_unpack.out"});

  // linalg_lu(A, pivot) -> (P, L, U)
  register_lowering("aten::linalg_lu", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_float(ctx.dtype(0), "linalg.lu");
    TORCH_CHECK(b.type(ctx.tensor(0)).rank() >= 2, "linalg.lu: Expected tensor with 2 or more dimensions.");
    TORCH_CHECK(ctx.bool_arg(1), "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
    Lu f = factor(b, ctx.tensor(0));
    auto [L, U] = unpack(b, f.lu);
    return std::vector<Value>{permutation_matrix(b, f.perm, b.element_type(f.lu)), L, U};
  }, {"aten::linalg_lu.out"});

  // linalg_lu_solve(LU, pivots, B, left, adjoint)
  register_lowering("aten::linalg_lu_solve", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value lu = square_input(ctx, 0, "linalg.lu_solve");
    Value rhs = ctx.tensor(2);
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(2), "linalg.lu_solve: Expected LU and B to have the same dtype, "
                "but found LU of type ", ctx.dtype(0), " and B of type ", ctx.dtype(2), " instead");
    TORCH_CHECK(b.type(rhs).rank() >= 2, "linalg.lu_solve: The input tensor B must have at least 2 dimensions.");
    bool left = ctx.bool_arg(3), adjoint = ctx.bool_arg(4);
    int64_t n = b.dims(lu).back();
    auto rd = b.dims(rhs);
    TORCH_CHECK((left ? rd[rd.size() - 2] : rd.back()) == n, "linalg.lu_solve: Incompatible shapes of A and B "
                "for the equation ", left ? "AX = B" : "XA = B");
    if (!left) rhs = transpose_last(b, rhs);
    auto batch = broadcast_shape(batch_of(b, lu, 2), batch_of(b, rhs, 2));
    Value perm = perm_from_pivots(b, ctx.tensor(1), n);
    lu = broadcast_batch(b, lu, batch, 2);
    perm = broadcast_batch(b, perm, batch, 1);
    rhs = broadcast_batch(b, rhs, batch, 2);
    // A^H X = B is A^T conj(X) = conj(B); X A = B is A^T X^T = B^T; and
    // X A^H = B is A conj(X^T) = conj(B^T).
    if (adjoint) rhs = conj(b, rhs);
    Value x = solve_with(b, lu, perm, rhs, left ? adjoint : !adjoint);
    if (adjoint) x = conj(b, x);
    return std::vector<Value>{left ? x : transpose_last(b, x)};
  }, {"aten::linalg_lu_solve.out"});

  // linalg_inv_ex(A, check_errors) -> (inverse, info)
  register_lowering("aten::linalg_inv_ex", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value a = square_input(ctx, 0, "linalg.inv");
    auto d = b.dims(a);
    int64_t r = static_cast<int64_t>(d.size());
    Lu f = factor(b, a);
    Value eye = b.convert(b.compare(b.iota(TensorType{ElementType::kS64, d}, r - 2),
                                    b.iota(TensorType{ElementType::kS64, d}, r - 1), hlo::Compare::kEq),
                          b.element_type(a));
    Value inv = solve_with(b, f.lu, f.perm, eye, false);
    if (ctx.bool_arg(1)) {
      require_nonsingular(ctx, f.info, "linalg.inv: a diagonal element of U is zero, the inversion "
                          "could not be completed because the input matrix is singular.");
    }
    return std::vector<Value>{inv, f.info};
  }, {"aten::linalg_inv_ex.inverse"});

  // _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info)
  register_lowering("aten::_linalg_solve_ex", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value a = square_input(ctx, 0, "linalg.solve");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "linalg.solve: Expected A and B to have the same dtype, but "
                "found A of type ", ctx.dtype(0), " and B of type ", ctx.dtype(1), " instead");
    Value rhs = ctx.tensor(1);
    bool left = ctx.bool_arg(2);
    auto ad = b.dims(a), rd = b.dims(rhs);
    int64_t n = ad.back();
    // B is a vector (or a batch of them) when it has one dim less than A
    // and A's batch shape, as torch decides.
    std::vector<int64_t> a_batch_n(ad.begin(), ad.end() - 1);
    bool vector = rd.size() == 1 || (rd.size() + 1 == ad.size() && rd == a_batch_n);
    // Everything as A X = B (or A^T X = B for X A = B), B as columns.
    if (vector) {
      auto e = rd;
      e.push_back(1);
      rhs = b.reshape(rhs, e);
    } else if (!left) {
      rhs = transpose_last(b, rhs);
    }
    auto bd = b.dims(rhs);
    TORCH_CHECK(bd[bd.size() - 2] == n, "linalg.solve: Incompatible shapes of A and B for the equation ",
                left ? "AX = B" : "XA = B");
    Lu f = factor(b, a);
    auto batch = broadcast_shape(batch_of(b, a, 2), batch_of(b, rhs, 2));
    Value x = solve_with(b, broadcast_batch(b, f.lu, batch, 2), broadcast_batch(b, f.perm, batch, 1),
                         broadcast_batch(b, rhs, batch, 2), !left);
    if (vector) {
      auto xd = b.dims(x);
      x = b.reshape(x, std::vector<int64_t>(xd.begin(), xd.end() - 1));
    } else if (!left) {
      x = transpose_last(b, x);
    }
    if (ctx.bool_arg(3)) {
      require_nonsingular(ctx, f.info, "torch.linalg.solve: The solver failed because the input "
                          "matrix is singular.");
    }
    return std::vector<Value>{x, f.lu, f.pivots, f.info};
  }, {"aten::_linalg_solve_ex.result"});

  // _linalg_det(A) -> (det, LU, pivots)
  register_lowering("aten::_linalg_det", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value a = square_input(ctx, 0, "linalg.det");
    Lu f = factor(b, det_factor_input(b, a));
    Value diag = diagonal(b, f.lu);
    int64_t r = b.type(diag).rank();
    Value prod = reduce(b, diag, {r - 1}, ReduceKind::kProd);
    Value det = b.select(swap_sign(b, f.pivots), b.unary("negate", prod), prod);
    return std::vector<Value>{det, f.lu, f.pivots};
  }, {"aten::_linalg_det.result"});

  // _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
  register_lowering("aten::_linalg_slogdet", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value a = square_input(ctx, 0, "linalg.slogdet");
    Lu f = factor(b, det_factor_input(b, a));
    Value diag = diagonal(b, f.lu);
    int64_t r = b.type(diag).rank();
    Value sign = reduce(b, b.unary("sign", diag), {r - 1}, ReduceKind::kProd);
    sign = b.select(swap_sign(b, f.pivots), b.unary("negate", sign), sign);
    Value mag = diag;
    if (hlo::is_complex(b.element_type(diag))) {
      Value re = b.real(diag), im = b.imag(diag);
      mag = b.unary("sqrt", b.binary("add", b.binary("multiply", re, re), b.binary("multiply", im, im)));
    }
    Value logabs = reduce(b, b.unary("log", b.unary("abs", mag)), {r - 1}, ReduceKind::kSum);
    return std::vector<Value>{sign, logabs, f.lu, f.pivots};
  }, {"aten::_linalg_slogdet.sign"});
});

}  // namespace
}  // namespace torch_pjrt::ops
