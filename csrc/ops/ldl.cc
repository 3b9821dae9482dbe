// LDL^T / LDL^H factorisation with Bunch-Kaufman pivoting and its solve:
// linalg.ldl_factor(_ex) and linalg.ldl_solve, as LAPACK's ?sytrf / ?hetrf
// (unblocked, uplo='L') and ?sytrs / ?hetrs compute them on the CPU.
// The factorisation is one stablehlo.while over the columns j; each batch
// entry carries a flag saying column j is the second half of its previous
// 2x2 pivot (then it does nothing). A step picks no interchange, a 1x1
// pivot with symmetric interchange or a 2x2 pivot from the column and row
// maxima, swaps rows and columns of the trailing block (on a full symmetric
// copy, so each swap is a masked row swap and a masked column swap), computes
// both the 1x1 and the 2x2 update with LAPACK's formulas, and selects. The
// solve walks the pivots forward (interchanges, L, D) and back (L^T) the
// same way.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

// v (dims a prefix of `dims`) broadcast along the trailing dims.
Value lead(Builder& c, Value v, const std::vector<int64_t>& dims) {
  return c.broadcast_in_dim(v, dims, all_dims(c.type(v).rank()));
}
// A batch + [k] vector laid along dim `at` of batch + [n, m].
Value along(Builder& c, Value v, const std::vector<int64_t>& dims, int64_t at) {
  auto map = all_dims(c.type(v).rank() - 1);
  map.push_back(at);
  return c.broadcast_in_dim(v, dims, map);
}
// Row i (batch-shaped index) of batch + [n, m]: batch + [m].
Value row_of(Builder& c, Value m, Value i) {
  auto d = c.dims(m);
  int64_t r = static_cast<int64_t>(d.size());
  return pick(c, c.compare(index_of(c, d, r - 2), lead(c, i, d), Compare::kEq), m, r - 2);
}
Value col_of(Builder& c, Value m, Value j) {
  auto d = c.dims(m);
  int64_t r = static_cast<int64_t>(d.size());
  return pick(c, c.compare(index_of(c, d, r - 1), lead(c, j, d), Compare::kEq), m, r - 1);
}
// Entry i (batch-shaped) of batch + [n]: batch.
Value elem(Builder& c, Value v, Value i) {
  auto d = c.dims(v);
  int64_t r = static_cast<int64_t>(d.size());
  return pick(c, c.compare(index_of(c, d, r - 1), lead(c, i, d), Compare::kEq), v, r - 1);
}
// Swaps rows i and k (batch-shaped) of batch + [n, m].
Value swap_rows(Builder& c, Value m, Value i, Value k) {
  auto d = c.dims(m);
  int64_t r = static_cast<int64_t>(d.size());
  Value row = index_of(c, d, r - 2);
  Value ri = row_of(c, m, i), rk = row_of(c, m, k);
  return c.select(c.compare(row, lead(c, i, d), Compare::kEq), along(c, rk, d, r - 1),
                  c.select(c.compare(row, lead(c, k, d), Compare::kEq), along(c, ri, d, r - 1), m));
}
// |re| + |im| (LAPACK's cabs1, what its i?amax compare), |x| for real.
Value mag1(Builder& c, Value z) {
  if (!hlo::is_complex(c.element_type(z))) return c.unary("abs", z);
  return c.binary("add", c.unary("abs", c.real(z)), c.unary("abs", c.imag(z)));
}
// s * z with real s and complex z, part by part (as Fortran scales).
Value rscale(Builder& c, Value s, Value z) {
  if (!hlo::is_complex(c.element_type(z))) return c.binary("multiply", s, z);
  return c.complex(c.binary("multiply", s, c.real(z)), c.binary("multiply", s, c.imag(z)));
}
Value real_diag(Builder& c, Value a) {
  auto d = c.dims(a);
  int64_t r = static_cast<int64_t>(d.size());
  Value re = c.real(a);
  Value diag = c.complex(re, c.zeros(c.type(re)));
  return c.select(c.compare(index_of(c, d, r - 2), index_of(c, d, r - 1), Compare::kEq), diag, a);
}
Value sc(Builder& c, double v, ElementType t, const std::vector<int64_t>& d) { return c.splat(c.constant(v, t), d); }
Value si(Builder& c, int64_t v, const std::vector<int64_t>& d) {
  return c.splat(c.constant_int(v, ElementType::kS64), d);
}
Value add(Builder& c, Value a, Value b) { return c.binary("add", a, b); }
Value sub(Builder& c, Value a, Value b) { return c.binary("subtract", a, b); }
Value mul(Builder& c, Value a, Value b) { return c.binary("multiply", a, b); }
Value div(Builder& c, Value a, Value b) { return c.binary("divide", a, b); }
Value land(Builder& c, Value a, Value b) { return c.binary("and", a, b); }
Value lor(Builder& c, Value a, Value b) { return c.binary("or", a, b); }
Value cmp(Builder& c, Value a, Value b, Compare d) { return c.compare(a, b, d); }

struct Ldl {
  Value ld, pivots, info;
};

Ldl factor(Builder& b, Value a, bool herm) {
  const auto dims = b.dims(a);
  const int64_t r = static_cast<int64_t>(dims.size()), n = dims[r - 1];
  const std::vector<int64_t> batch(dims.begin(), dims.end() - 2), bn = with(batch, {n});
  const ElementType t = b.element_type(a), rt = real_type(b, a);
  Value A = b.select(cmp(b, index_of(b, dims, r - 2), index_of(b, dims, r - 1), Compare::kGe), a, b.zeros(b.type(a)));
  if (herm) A = real_diag(b, A);
  Value piv = b.zeros(TensorType{ElementType::kS32, bn});
  Value info = b.zeros(TensorType{ElementType::kS32, batch});
  if (n == 0) return {A, piv, info};
  // alpha = (1 + sqrt(17)) / 8, rounded in the working precision.
  const double alpha = rt == ElementType::kF32 ? static_cast<double>((1.0f + std::sqrt(17.0f)) / 8.0f)
                                               : (1.0 + std::sqrt(17.0)) / 8.0;
  Value skip = b.convert(b.zeros(TensorType{ElementType::kS32, batch}), ElementType::kPred);
  auto out = for_range(b, n, {A, piv, info, skip}, [&](Builder& c, Value j, const std::vector<Value>& v) {
    Value A = v[0], piv = v[1], info = v[2], skip = v[3];
    Value row = index_of(c, dims, r - 2), col = index_of(c, dims, r - 1), ri = index_of(c, bn, r - 2);
    Value jb = c.splat(j, batch), jm = c.splat(j, dims), jv = c.splat(j, bn);
    Value j1b = add(c, jb, si(c, 1, batch)), j1m = add(c, jm, si(c, 1, dims)), j1v = add(c, jv, si(c, 1, bn));
    Value zr = sc(c, 0, rt, batch);
    auto absd = [&](Value z) { return herm ? c.unary("abs", c.real(z)) : mag1(c, z); };
    // The trailing block as a full matrix (the mirror conjugated for LDL^H).
    Value At = transpose_last(c, A);
    if (herm) At = conj(c, At);
    Value S = c.select(cmp(c, row, col, Compare::kGe), A, At);
    // Column j's diagonal and its largest entry below (the first of equals).
    Value colj = col_of(c, A, jb);
    Value absakk = absd(elem(c, colj, jb));
    Value below = cmp(c, ri, jv, Compare::kGt);
    Value cm = c.select(below, mag1(c, colj), sc(c, 0, rt, bn));
    Value colmax = reduce(c, cm, {r - 2}, ReduceKind::kMax);
    Value hit = land(c, below, cmp(c, cm, lead(c, colmax, bn), Compare::kEq));
    Value imax = reduce(c, c.select(hit, ri, si(c, n, bn)), {r - 2}, ReduceKind::kMin);
    imax = c.select(cmp(c, imax, si(c, n, batch), Compare::kLt), imax, jb);
    // Row imax of the trailing block: its largest off-diagonal entry.
    Value rowi = row_of(c, S, imax);
    Value others = land(c, cmp(c, ri, jv, Compare::kGe), cmp(c, ri, lead(c, imax, bn), Compare::kNe));
    Value rowmax = reduce(c, c.select(others, mag1(c, rowi), sc(c, 0, rt, bn)), {r - 2}, ReduceKind::kMax);
    Value absimax = absd(elem(c, rowi, imax));
    Value al = sc(c, alpha, rt, batch);
    Value zero_piv = lor(c, cmp(c, c.binary("maximum", absakk, colmax), zr, Compare::kEq),
                         cmp(c, absakk, absakk, Compare::kNe));
    Value ac = mul(c, al, colmax);
    Value keep = lor(c, zero_piv, lor(c, cmp(c, absakk, ac, Compare::kGe),
                                      cmp(c, absakk, mul(c, ac, div(c, colmax, rowmax)), Compare::kGe)));
    Value c3 = cmp(c, absimax, mul(c, al, rowmax), Compare::kGe);
    Value two = land(c, c.unary("not", keep), c.unary("not", c3));
    Value kp = c.select(keep, jb, imax);
    Value kk = c.select(two, j1b, jb);
    // Interchange rows and columns kk and kp of the trailing block.
    Value KK = lead(c, kk, dims), KP = lead(c, kp, dims);
    Value tc = cmp(c, col, jm, Compare::kGe), tr = cmp(c, row, jm, Compare::kGe);
    Value rkk = row_of(c, S, kk), rkp = row_of(c, S, kp);
    Value S1 = c.select(land(c, cmp(c, row, KK, Compare::kEq), tc), along(c, rkp, dims, r - 1),
                        c.select(land(c, cmp(c, row, KP, Compare::kEq), tc), along(c, rkk, dims, r - 1), S));
    Value ckk = col_of(c, S1, kk), ckp = col_of(c, S1, kp);
    Value S2 = c.select(land(c, cmp(c, col, KK, Compare::kEq), tr), along(c, ckp, dims, r - 2),
                        c.select(land(c, cmp(c, col, KP, Compare::kEq), tr), along(c, ckk, dims, r - 2), S1));
    Value lower = cmp(c, row, col, Compare::kGe);
    Value A0 = c.select(land(c, tc, lower), S2, A);
    // 1x1 pivot: A22 -= x d^-1 x^T (x^H), then the column x d^-1.
    Value zt = c.zeros(TensorType{t, bn});
    Value c0 = col_of(c, A0, jb);
    Value x = c.select(below, c0, zt);
    Value d = elem(c, c0, jb);
    Value tv, l;
    if (herm) {
      Value r1 = lead(c, div(c, sc(c, 1, rt, batch), c.real(d)), bn);
      tv = rscale(c, c.unary("negate", r1), conj(c, x));
      l = rscale(c, r1, x);
    } else {
      Value d11 = lead(c, div(c, sc(c, 1, t, batch), d), bn);
      tv = mul(c, c.unary("negate", d11), x);
      l = mul(c, d11, x);
    }
    Value trail1 = land(c, land(c, cmp(c, row, jm, Compare::kGt), cmp(c, col, jm, Compare::kGt)), lower);
    Value A1 = c.select(trail1, add(c, A0, mul(c, along(c, x, dims, r - 2), along(c, tv, dims, r - 1))), A0);
    A1 = c.select(land(c, cmp(c, col, jm, Compare::kEq), cmp(c, row, jm, Compare::kGt)), along(c, l, dims, r - 2), A1);
    // 2x2 pivot on columns j, j + 1.
    Value c1 = col_of(c, A0, j1b);
    Value e = elem(c, c0, j1b), dkk = elem(c, c0, jb), dk1 = elem(c, c1, j1b);
    Value below2 = cmp(c, ri, j1v, Compare::kGt);
    Value av = c.select(below2, c0, zt), cv = c.select(below2, c1, zt);
    Value wk, wkp1;
    if (!herm) {
      Value D11 = div(c, dk1, e), D22 = div(c, dkk, e);
      Value T = div(c, sc(c, 1, t, batch), sub(c, mul(c, D11, D22), sc(c, 1, t, batch)));
      Value D21 = lead(c, div(c, T, e), bn);
      wk = mul(c, D21, sub(c, mul(c, lead(c, D11, bn), av), cv));
      wkp1 = mul(c, D21, sub(c, mul(c, lead(c, D22, bn), cv), av));
    } else {
      Value D = modulus(c, e);
      Value D11 = div(c, c.real(dk1), D), D22 = div(c, c.real(dkk), D);
      Value TT = div(c, sc(c, 1, rt, batch), sub(c, mul(c, D11, D22), sc(c, 1, rt, batch)));
      Value D21 = lead(c, c.complex(div(c, c.real(e), D), div(c, c.imag(e), D)), bn);
      Value Dd = lead(c, div(c, TT, D), bn);
      wk = rscale(c, Dd, sub(c, rscale(c, lead(c, D11, bn), av), mul(c, D21, cv)));
      wkp1 = rscale(c, Dd, sub(c, rscale(c, lead(c, D22, bn), cv), mul(c, conj(c, D21), av)));
    }
    Value wkc = herm ? conj(c, wk) : wk, wkp1c = herm ? conj(c, wkp1) : wkp1;
    Value trail2 = land(c, land(c, cmp(c, row, j1m, Compare::kGt), cmp(c, col, j1m, Compare::kGt)), lower);
    Value upd = sub(c, sub(c, A0, mul(c, along(c, av, dims, r - 2), along(c, wkc, dims, r - 1))),
                    mul(c, along(c, cv, dims, r - 2), along(c, wkp1c, dims, r - 1)));
    Value A2 = c.select(trail2, upd, A0);
    Value under = cmp(c, row, j1m, Compare::kGt);
    A2 = c.select(land(c, cmp(c, col, jm, Compare::kEq), under), along(c, wk, dims, r - 2), A2);
    A2 = c.select(land(c, cmp(c, col, j1m, Compare::kEq), under), along(c, wkp1, dims, r - 2), A2);
    // Pick the step each batch entry takes.
    Value active = c.unary("not", skip);
    Value An = c.select(lead(c, zero_piv, dims), A0, c.select(lead(c, two, dims), A2, A1));
    An = c.select(lead(c, active, dims), An, A);
    Value kp1 = c.convert(add(c, kp, si(c, 1, batch)), ElementType::kS32);
    Value pv = c.select(two, c.unary("negate", kp1), kp1);
    Value at = lor(c, cmp(c, ri, jv, Compare::kEq), land(c, lead(c, two, bn), cmp(c, ri, j1v, Compare::kEq)));
    Value piv1 = c.select(land(c, lead(c, active, bn), at), lead(c, pv, bn), piv);
    Value first = land(c, land(c, active, zero_piv), cmp(c, info, c.zeros(c.type(info)), Compare::kEq));
    Value info1 = c.select(first, c.convert(j1b, ElementType::kS32), info);
    return std::vector<Value>{An, piv1, info1, land(c, active, two)};
  });
  Value ld = out[0];
  if (herm) ld = real_diag(b, ld);
  return {ld, out[1], out[2]};
}

// Solves A X = B from ?sytrf's LD and pivots (all sharing batch dims).
Value solve(Builder& b, Value ld, Value pivots, Value rhs, bool herm) {
  const auto dims = b.dims(rhs);
  const int64_t r = static_cast<int64_t>(dims.size()), n = dims[r - 2];
  const std::vector<int64_t> batch(dims.begin(), dims.end() - 2), bn = with(batch, {n});
  const ElementType t = b.element_type(rhs), rt = real_type(b, rhs);
  if (n == 0) return rhs;
  Value pv = b.convert(pivots, ElementType::kS64);
  Value skip = b.convert(b.zeros(TensorType{ElementType::kS32, batch}), ElementType::kPred);
  auto one_of = [&](Builder& c, Value pj) { return cmp(c, pj, si(c, 0, batch), Compare::kGt); };
  auto target = [&](Builder& c, Value pj, Value one) {  // 0-based row a pivot names
    return c.select(one, sub(c, pj, si(c, 1, batch)), sub(c, c.unary("negate", pj), si(c, 1, batch)));
  };
  // L D Y = P B, one pivot block at a time.
  auto fwd = for_range(b, n, {rhs, skip, ld, pv}, [&](Builder& c, Value j, const std::vector<Value>& v) {
    Value B = v[0], skip = v[1], LD = v[2], pv = v[3];
    Value row = index_of(c, dims, r - 2);
    Value jb = c.splat(j, batch), j1b = add(c, jb, si(c, 1, batch));
    Value jm = c.splat(j, dims), j1m = add(c, jm, si(c, 1, dims));
    Value pj = elem(c, pv, jb), one = one_of(c, pj);
    Value B1 = swap_rows(c, B, c.select(one, jb, j1b), target(c, pj, one));
    Value a = col_of(c, LD, jb), cc = col_of(c, LD, j1b);
    Value bj = row_of(c, B1, jb), bj1 = row_of(c, B1, j1b);
    Value A_ = along(c, a, dims, r - 2), C_ = along(c, cc, dims, r - 2);
    Value nbj = along(c, c.unary("negate", bj), dims, r - 1), nbj1 = along(c, c.unary("negate", bj1), dims, r - 1);
    Value U1 = c.select(cmp(c, row, jm, Compare::kGt), add(c, B1, mul(c, A_, nbj)), B1);
    Value d = elem(c, a, jb);
    Value y = herm ? rscale(c, lead(c, div(c, sc(c, 1, rt, batch), c.real(d)), c.dims(bj)), bj)
                   : mul(c, lead(c, div(c, sc(c, 1, t, batch), d), c.dims(bj)), bj);
    U1 = c.select(cmp(c, row, jm, Compare::kEq), along(c, y, dims, r - 1), U1);
    Value U2 = c.select(cmp(c, row, j1m, Compare::kGt), add(c, add(c, B1, mul(c, A_, nbj)), mul(c, C_, nbj1)), B1);
    Value e = elem(c, a, j1b), dkk = elem(c, a, jb), dk1 = elem(c, cc, j1b);
    Value ec = herm ? conj(c, e) : e;
    Value akm1 = div(c, dkk, ec), ak = div(c, dk1, e);
    Value denom = lead(c, sub(c, mul(c, akm1, ak), sc(c, 1, t, batch)), c.dims(bj));
    Value bkm1 = div(c, bj, lead(c, ec, c.dims(bj))), bk = div(c, bj1, lead(c, e, c.dims(bj)));
    Value akm1v = lead(c, akm1, c.dims(bj)), akv = lead(c, ak, c.dims(bj));
    Value y0 = div(c, sub(c, mul(c, akv, bkm1), bk), denom), y1 = div(c, sub(c, mul(c, akm1v, bk), bkm1), denom);
    U2 = c.select(cmp(c, row, jm, Compare::kEq), along(c, y0, dims, r - 1),
                  c.select(cmp(c, row, j1m, Compare::kEq), along(c, y1, dims, r - 1), U2));
    Value active = c.unary("not", skip);
    Value Bn = c.select(lead(c, active, dims), c.select(lead(c, one, dims), U1, U2), B);
    return std::vector<Value>{Bn, land(c, active, c.unary("not", one)), LD, pv};
  });
  // L^T X = Y (L^H for LDL^H), from the last block up.
  auto bwd = for_range(b, n, {fwd[0], skip, ld, pv}, [&](Builder& c, Value i, const std::vector<Value>& v) {
    Value B = v[0], skip = v[1], LD = v[2], pv = v[3];
    Value row = index_of(c, dims, r - 2);
    Value j = sub(c, c.constant_int(n - 1, ElementType::kS64), i);
    Value jb = c.splat(j, batch), jm1b = sub(c, jb, si(c, 1, batch));
    Value jm = c.splat(j, dims);
    Value pj = elem(c, pv, jb), one = one_of(c, pj);
    Value a = col_of(c, LD, jb), am = col_of(c, LD, jm1b);
    if (herm) {
      a = conj(c, a);
      am = conj(c, am);
    }
    Value below = cmp(c, row, jm, Compare::kGt);
    Value zero = c.zeros(c.type(B));
    Value s0 = reduce(c, c.select(below, mul(c, along(c, a, dims, r - 2), B), zero), {r - 2}, ReduceKind::kSum);
    Value s1 = reduce(c, c.select(below, mul(c, along(c, am, dims, r - 2), B), zero), {r - 2}, ReduceKind::kSum);
    Value B1 = c.select(cmp(c, row, jm, Compare::kEq), along(c, sub(c, row_of(c, B, jb), s0), dims, r - 1), B);
    Value second = land(c, lead(c, c.unary("not", one), dims), cmp(c, row, lead(c, jm1b, dims), Compare::kEq));
    B1 = c.select(second, along(c, sub(c, row_of(c, B, jm1b), s1), dims, r - 1), B1);
    B1 = swap_rows(c, B1, jb, target(c, pj, one));
    Value active = c.unary("not", skip);
    Value Bn = c.select(lead(c, active, dims), B1, B);
    return std::vector<Value>{Bn, land(c, active, c.unary("not", one)), LD, pv};
  });
  return bwd[0];
}

void check_input(c10::ScalarType type, const char* op, const char* kernel) {
  TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type), op,
              ": Expected a floating point or complex tensor as input. Got ", type);
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                                  type == at::kComplexDouble,
                              "\"", kernel, "\" not implemented for '", c10::toString(type), "'");
}

void check_square(Builder& b, Value a, const char* op) {
  auto d = b.dims(a);
  TORCH_CHECK(d.size() >= 2, op, ": The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(d[d.size() - 2] == d.back(), op, ": A must be batches of square matrices, but they are ",
              d[d.size() - 2], " by ", d.back(), " matrices");
}

LoweringRegistrar registrar([] {
  // linalg_ldl_factor_ex(A, hermitian, check_errors) -> (LD, pivots, info)
  register_lowering("aten::linalg_ldl_factor_ex", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    const char* op = "torch.linalg.ldl_factor_ex";
    Value a = ctx.tensor(0);
    check_square(b, a, op);
    check_input(ctx.dtype(0), op, "ldl_factor_kernel_cpu");
    bool herm = ctx.bool_arg(1) && c10::isComplexType(ctx.dtype(0));
    Ldl f = factor(b, a, herm);
    if (ctx.bool_arg(2)) {
      Value worst = reduce(b, f.info, all_dims(b.type(f.info).rank()), ReduceKind::kMax);
      ctx.require(b.compare(worst, b.constant_int(0, ElementType::kS32), Compare::kEq),
                  "torch.linalg.ldl_factor_ex: the factorization has a zero pivot (the matrix is singular)",
                  /*index_error=*/false);
    }
    return std::vector<Value>{f.ld, f.pivots, f.info};
  }, {"aten::linalg_ldl_factor_ex.out"});

  // linalg_ldl_solve(LD, pivots, B, hermitian) -> X
  register_lowering("aten::linalg_ldl_solve", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    const char* op = "torch.linalg.ldl_solve";
    Value ld = ctx.tensor(0), pivots = ctx.tensor(1), rhs = ctx.tensor(2);
    check_square(b, ld, op);
    {
      int64_t rank = b.type(rhs).rank(), w = std::max<int64_t>(rank, 1);
      TORCH_CHECK_INDEX(rank >= 2, "Dimension out of range (expected to be in range of [", -w, ", ", w - 1,
                        "], but got -2)");
    }
    check_input(ctx.dtype(0), op, "ldl_solve_kernel_cpu");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(2), "Expected b and A to have the same dtype, but found b of type ",
                ctx.dtype(2), " and A of type ", ctx.dtype(0), " instead.");
    TORCH_CHECK(c10::isIntegralType(ctx.dtype(1), /*includeBool=*/false), op,
                ": Expected pivots to be integers. Got ", ctx.dtype(1));
    auto ld_d = b.dims(ld);
    std::vector<int64_t> head(ld_d.begin(), ld_d.end() - 1);
    TORCH_CHECK(b.dims(pivots) == head, op, ": Expected LD.shape[:-1] and pivots.shape to be the same, but got "
                "pivots with shape ", c10::IntArrayRef(b.dims(pivots)), " instead");
    int64_t n = ld_d.back();
    auto rd = b.dims(rhs);
    TORCH_CHECK(rd[rd.size() - 2] == n, "Incompatible matrix sizes for ", op, ": each A matrix is ", n, " by ",
                n, " but each b matrix is ", rd[rd.size() - 2], " by ", rd.back());
    if (n > 0) {
      Value p = b.convert(pivots, ElementType::kS64);
      Value mag = reduce(b, b.unary("abs", p), all_dims(b.type(p).rank()), ReduceKind::kMin);
      Value big = reduce(b, b.unary("abs", p), all_dims(b.type(p).rank()), ReduceKind::kMax);
      ctx.require(b.compare(mag, b.constant_int(1, ElementType::kS64), Compare::kGe),
                  "Pivots given to ldl_solve must all satisfy |pivot| >= 1. Did you properly pass the result "
                  "of ldl_factor?", /*index_error=*/false);
      ctx.require(b.compare(big, b.constant_int(n, ElementType::kS64), Compare::kLe),
                  "Pivots given to ldl_solve must all satisfy |pivot| <= LD.size(-2). Did you properly pass "
                  "the result of ldl_factor?", /*index_error=*/false);
    }
    bool herm = ctx.bool_arg(3) && c10::isComplexType(ctx.dtype(0));
    auto batch = broadcast_shape(batch_of(b, ld, 2), batch_of(b, rhs, 2));
    Value x = solve(b, broadcast_batch(b, ld, batch, 2), broadcast_batch(b, pivots, batch, 1),
                    broadcast_batch(b, rhs, batch, 2), herm);
    return std::vector<Value>{x};
  }, {"aten::linalg_ldl_solve.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
