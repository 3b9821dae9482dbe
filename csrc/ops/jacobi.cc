// Hermitian eigendecomposition (linalg.eigh, eigvalsh) and the singular
// value decomposition (linalg.svd, svdvals, and what torch builds on them:
// pinv, matrix_rank, cond, the nuclear and spectral norms) by cyclic Jacobi
// rotations, which need nothing but elementwise math, slices and loops:
//   - eigh: two-sided rotations J^H A J, each zeroing one off-diagonal pair,
//     sweep after sweep until the off-diagonal mass is below the dtype's
//     epsilon times ||A||_F (Jacobi converges quadratically);
//   - svd: one-sided (Hestenes) rotations of the columns of A (of A^H when
//     it is wide) until every pair is orthogonal to working precision; the
//     singular values are the column norms, U the normalised columns,
//     completed to a unitary matrix through Householder QR.
// A complex pair is first turned real by a phase, so one rotation formula
// serves both. Results are sorted as LAPACK's (eigenvalues ascending,
// singular values descending); vectors are defined up to sign or phase, as
// on every backend.
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "ops/jacobi.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

constexpr int64_t kMaxSweeps = 40;

double epsilon(ElementType t) {
  return t == ElementType::kF64 || t == ElementType::kC128 ? std::numeric_limits<double>::epsilon()
                                                            : std::numeric_limits<float>::epsilon();
}

Value fill(Builder& b, double v, ElementType t, const std::vector<int64_t>& dims) {
  return b.splat(b.constant(v, t), dims);
}

Value s64(Builder& b, int64_t v) { return b.constant_int(v, ElementType::kS64); }

// A real batch value as x's element type (complex gets a zero imaginary part).
Value as_type_of(Builder& b, Value real, ElementType t) {
  if (!hlo::is_complex(t)) return real;
  return b.complex(real, b.zeros(b.type(real)));
}

// The 1-wide slice at `index` of x's dim `dim`.
Value line(Builder& b, Value x, int64_t dim, Value index) {
  auto d = b.dims(x);
  std::vector<Value> starts(d.size(), s64(b, 0));
  starts[dim] = index;
  auto sizes = d;
  sizes[dim] = 1;
  return b.dynamic_slice(x, starts, sizes);
}

Value put_line(Builder& b, Value x, Value update, int64_t dim, Value index) {
  std::vector<Value> starts(b.dims(x).size(), s64(b, 0));
  starts[dim] = index;
  return b.dynamic_update_slice(x, update, starts);
}

// Entry (i, j) of each matrix, as batch.
Value element(Builder& b, Value x, Value i, Value j) {
  auto d = b.dims(x);
  int64_t r = static_cast<int64_t>(d.size());
  std::vector<Value> starts(r, s64(b, 0));
  starts[r - 2] = i;
  starts[r - 1] = j;
  auto sizes = d;
  sizes[r - 2] = sizes[r - 1] = 1;
  return b.reshape(b.dynamic_slice(x, starts, sizes), std::vector<int64_t>(d.begin(), d.end() - 2));
}

// One plane rotation: with lines x_p, x_q of `dim`,
//   x_p <- c x_p - s phase x_q,   x_q <- s x_p + c phase x_q.
// c and s are real batch values; phase is batch, of x's element type.
Value rotate(Builder& b, Value x, int64_t dim, Value p, Value q, Value c, Value s, Value phase) {
  ElementType t = b.element_type(x);
  Value xp = line(b, x, dim, p), xq = line(b, x, dim, q);
  auto ld = b.dims(xp);
  std::vector<int64_t> batch = all_dims(static_cast<int64_t>(ld.size()) - 2);
  auto spread = [&](Value v) { return b.broadcast_in_dim(v, ld, batch); };
  Value cc = spread(as_type_of(b, c, t)), ss = spread(as_type_of(b, s, t)), ph = spread(phase);
  Value phq = b.binary("multiply", ph, xq);
  Value np = b.binary("subtract", b.binary("multiply", cc, xp), b.binary("multiply", ss, phq));
  Value nq = b.binary("add", b.binary("multiply", ss, xp), b.binary("multiply", cc, phq));
  return put_line(b, put_line(b, x, np, dim, p), nq, dim, q);
}

struct Rotation {
  Value c, s;       // real, batch
  Value phase;      // element type, batch: g / |g|
  Value rotates;    // i1, batch: false where the pair is left alone
};

// The rotation that zeroes the off-diagonal g of the Hermitian 2x2 block
// [[a, g], [conj(g), d]] (a, d real). Left alone where `skip` holds.
Rotation rotation(Builder& b, Value a, Value d, Value g, Value skip) {
  ElementType t = b.element_type(g);
  Value mag = modulus(b, g);
  ElementType rt = b.element_type(mag);
  auto bd = b.dims(mag);
  Value zero = b.zeros(b.type(mag)), one = fill(b, 1.0, rt, bd);
  Value rotates = b.binary("and", b.compare(mag, zero, Compare::kGt), b.unary("not", skip));
  Value safe = b.select(rotates, mag, one);
  Value phase = b.select(rotates, b.binary("divide", g, as_type_of(b, safe, t)), as_type_of(b, one, t));
  // theta = (d - a) / (2 |g|); t = sign(theta) / (|theta| + sqrt(1 + theta^2)).
  Value theta = b.binary("divide", b.binary("subtract", d, a), b.binary("multiply", fill(b, 2.0, rt, bd), safe));
  Value at = b.unary("abs", theta);
  Value huge = b.compare(at, fill(b, 1e15, rt, bd), Compare::kGt);
  Value root = b.unary("sqrt", b.binary("add", one, b.binary("multiply", theta, theta)));
  Value tan = b.select(huge, b.binary("divide", fill(b, 0.5, rt, bd), at),
                       b.binary("divide", one, b.binary("add", at, root)));
  tan = b.select(b.compare(theta, zero, Compare::kLt), b.unary("negate", tan), tan);
  Value c = b.unary("rsqrt", b.binary("add", one, b.binary("multiply", tan, tan)));
  Value s = b.binary("multiply", tan, c);
  c = b.select(rotates, c, one);
  s = b.select(rotates, s, zero);
  return {c, s, phase, rotates};
}

// The next pair after (p, q) in row-cyclic order over p < q < n.
std::pair<Value, Value> next_pair(Builder& b, Value p, Value q, int64_t n) {
  Value q1 = b.binary("add", q, s64(b, 1));
  Value wrap = b.compare(q1, s64(b, n), Compare::kEq);
  Value p1 = b.binary("add", p, s64(b, 1));
  return {b.select(wrap, p1, p), b.select(wrap, b.binary("add", p1, s64(b, 1)), q1)};
}

// Runs sweeps of all n (n - 1) / 2 pairs while `go` (0-d i1, from the
// carried values after each sweep) holds, at most kMaxSweeps.
using PairStep = std::function<std::vector<Value>(Builder&, Value p, Value q, const std::vector<Value>&)>;
using Verdict = std::function<Value(Builder&, const std::vector<Value>&)>;

std::vector<Value> sweeps(Builder& b, int64_t n, std::vector<Value> carried, const PairStep& step,
                          const Verdict& unfinished) {
  int64_t pairs = n * (n - 1) / 2;
  if (pairs == 0) return carried;
  carried.insert(carried.begin(), {s64(b, 0), unfinished(b, carried)});
  auto out = b.while_loop(
      carried,
      [](Builder& c, const std::vector<Value>& v) {
        return std::vector<Value>{c.binary("and", c.compare(v[0], s64(c, kMaxSweeps), Compare::kLt), v[1])};
      },
      [&](Builder& c, const std::vector<Value>& v) {
        std::vector<Value> state(v.begin() + 2, v.end());
        state.insert(state.begin(), {s64(c, 0), s64(c, 1)});
        auto swept = for_range(c, pairs, state, [&](Builder& e, Value, const std::vector<Value>& w) {
          std::vector<Value> rest(w.begin() + 2, w.end());
          std::vector<Value> next = step(e, w[0], w[1], rest);
          auto [p, q] = next_pair(e, w[0], w[1], n);
          next.insert(next.begin(), {p, q});
          return next;
        });
        std::vector<Value> values(swept.begin() + 2, swept.end());
        std::vector<Value> result{c.binary("add", v[0], s64(c, 1)), unfinished(c, values)};
        result.insert(result.end(), values.begin(), values.end());
        return result;
      });
  return std::vector<Value>(out.begin() + 2, out.end());
}

// max over the batch of x (a real batch value), as a 0-d value; -inf for an
// empty batch.
Value batch_max(Builder& b, Value x) {
  return reduce(b, x, all_dims(b.type(x).rank()), ReduceKind::kMax);
}

// Sorts `values` (real, batch + [n]) along the last dim, ascending or
// descending (stable), and permutes the columns of each of `vectors`
// (batch + [m, n]) alike.
std::pair<Value, std::vector<Value>> sort_with(Builder& b, Value values, std::vector<Value> vectors,
                                               bool descending) {
  auto vd = b.dims(values);
  int64_t r = static_cast<int64_t>(vd.size());
  Value idx = index_of(b, vd, r - 1);
  auto sorted = b.sort({values, idx}, r - 1, /*stable=*/true, [descending](Builder& c, const std::vector<Value>& a) {
    return std::vector<Value>{c.compare(a[0], a[1], descending ? Compare::kGt : Compare::kLt)};
  });
  if (vectors.empty()) return {sorted[0], vectors};
  int64_t n = vd.back();
  // P[i, j] = (perm[j] == i): X P moves column perm[j] to j.
  auto pd = with(std::vector<int64_t>(vd.begin(), vd.end() - 1), {n, n});
  auto map = all_dims(r - 1);
  map.push_back(r);
  Value perm = b.broadcast_in_dim(sorted[1], pd, map);
  Value onehot = b.compare(index_of(b, pd, r - 1), perm, Compare::kEq);
  for (Value& x : vectors) x = batched_matmul(b, x, b.convert(onehot, b.element_type(x)));
  return {sorted[0], vectors};
}

// The Hermitian matrix LAPACK reads from one triangle of A (the diagonal's
// imaginary part ignored).
Value hermitian_from(Builder& b, Value a, bool lower) {
  auto d = b.dims(a);
  int64_t r = static_cast<int64_t>(d.size());
  Value row = index_of(b, d, r - 2), col = index_of(b, d, r - 1);
  Value h = b.select(b.compare(row, col, lower ? Compare::kGt : Compare::kLt), a, adjoint(b, a));
  if (!hlo::is_complex(b.element_type(a))) return h;
  Value real_diag = b.complex(b.real(a), b.zeros(TensorType{real_type(b, a), d}));
  return b.select(b.compare(row, col, Compare::kEq), real_diag, h);
}

Value real_part(Builder& b, Value x) { return hlo::is_complex(b.element_type(x)) ? b.real(x) : x; }

struct Eigh {
  Value values, vectors;
};

Eigh eigh(Builder& b, Value a, bool lower, bool vectors) {
  auto d = b.dims(a);
  int64_t r = static_cast<int64_t>(d.size()), n = d.back();
  ElementType t = b.element_type(a);
  Value h = hermitian_from(b, a, lower);
  Value v = eye(b, t, d);
  double eps = epsilon(t);
  // ||A||_F per matrix, which the rotations preserve.
  Value mag = modulus(b, h);
  Value fro2 = reduce(b, b.binary("multiply", mag, mag), {r - 2, r - 1}, ReduceKind::kSum);
  Value tol2 = b.binary("multiply", fro2, fill(b, eps * eps, b.element_type(fro2), b.dims(fro2)));
  auto unfinished = [r](Builder& c, const std::vector<Value>& w) {
    Value A = w[0];
    auto ad = c.dims(A);
    Value off = c.select(c.compare(index_of(c, ad, r - 2), index_of(c, ad, r - 1), Compare::kNe), A,
                         c.zeros(c.type(A)));
    Value m = modulus(c, off);
    Value off2 = reduce(c, c.binary("multiply", m, m), {r - 2, r - 1}, ReduceKind::kSum);
    Value excess = c.binary("subtract", off2, w[2]);
    return c.compare(batch_max(c, excess), c.zeros(TensorType{c.element_type(excess), {}}), Compare::kGt);
  };
  auto out = sweeps(b, n, {h, v, tol2}, [&](Builder& c, Value p, Value q, const std::vector<Value>& w) {
    Value A = w[0], V = w[1];
    Value app = real_part(c, element(c, A, p, p)), aqq = real_part(c, element(c, A, q, q));
    Value apq = element(c, A, p, q);
    Value never = c.splat(c.constant_bool(false), c.dims(app));
    Rotation rot = rotation(c, app, aqq, apq, never);
    Value phase_conj = conj(c, rot.phase);
    A = rotate(c, A, r - 1, p, q, rot.c, rot.s, phase_conj);  // A J
    A = rotate(c, A, r - 2, p, q, rot.c, rot.s, rot.phase);   // J^H (A J)
    // The pair is zero now, up to rounding: make it exactly zero.
    auto zd = c.dims(line(c, line(c, A, r - 2, p), r - 1, q));
    Value z = c.zeros(TensorType{c.element_type(A), zd});
    std::vector<Value> at_pq(r, s64(c, 0)), at_qp(r, s64(c, 0));
    at_pq[r - 2] = p;
    at_pq[r - 1] = q;
    at_qp[r - 2] = q;
    at_qp[r - 1] = p;
    auto bd = c.dims(rot.rotates);
    auto keep = [&](Value x, const std::vector<Value>& at) {
      Value zeroed = c.dynamic_update_slice(x, z, at);
      return c.select(c.broadcast_in_dim(rot.rotates, c.dims(x), all_dims(static_cast<int64_t>(bd.size()))),
                      zeroed, x);
    };
    A = keep(keep(A, at_pq), at_qp);
    V = rotate(c, V, r - 1, p, q, rot.c, rot.s, phase_conj);
    return std::vector<Value>{A, V, w[2]};
  }, unfinished);
  Value values = real_part(b, diagonal(b, out[0]));
  auto sorted = sort_with(b, values, vectors ? std::vector<Value>{out[1]} : std::vector<Value>{}, false);
  return {sorted.first, vectors ? sorted.second[0] : Value{}};
}

// The SVD of a tall (m >= n) batch of matrices.
Svd svd_tall(Builder& b, Value a, bool full, bool uv) {
  auto d = b.dims(a);
  int64_t r = static_cast<int64_t>(d.size()), m = d[r - 2], n = d[r - 1];
  ElementType t = b.element_type(a);
  std::vector<int64_t> batch(d.begin(), d.end() - 2);
  double eps = epsilon(t);
  double tol = eps * static_cast<double>(std::max<int64_t>(m, 1));
  Value v = eye(b, t, with(batch, {n, n}));
  ElementType rt = real_type(b, a);
  // Carried: X, V, and the largest |x_p^H x_q| / (|x_p| |x_q|) of the sweep.
  auto unfinished = [tol, rt](Builder& c, const std::vector<Value>& w) {
    return c.compare(w[2], c.constant(tol, rt), Compare::kGt);
  };
  Value start_worst = b.constant(2 * tol + 1, rt);
  auto out = sweeps(b, n, {a, v, start_worst}, [&](Builder& c, Value p, Value q, const std::vector<Value>& w) {
    Value X = w[0], V = w[1];
    Value xp = line(c, X, r - 1, p), xq = line(c, X, r - 1, q);
    Value mp = modulus(c, xp), mq = modulus(c, xq);
    Value alpha = reduce(c, c.binary("multiply", mp, mp), {r - 2, r - 1}, ReduceKind::kSum);
    Value beta = reduce(c, c.binary("multiply", mq, mq), {r - 2, r - 1}, ReduceKind::kSum);
    Value gamma = reduce(c, c.binary("multiply", conj(c, xp), xq), {r - 2, r - 1}, ReduceKind::kSum);
    Value g = modulus(c, gamma);
    Value scale = c.unary("sqrt", c.binary("multiply", alpha, beta));
    Value zero = c.zeros(c.type(g));
    Value ratio = c.select(c.compare(scale, zero, Compare::kGt), c.binary("divide", g, c.select(
        c.compare(scale, zero, Compare::kGt), scale, fill(c, 1.0, rt, c.dims(scale)))), zero);
    Value skip = c.compare(ratio, fill(c, eps, rt, c.dims(ratio)), Compare::kLe);
    Rotation rot = rotation(c, alpha, beta, gamma, skip);
    Value phase_conj = conj(c, rot.phase);
    X = rotate(c, X, r - 1, p, q, rot.c, rot.s, phase_conj);
    V = rotate(c, V, r - 1, p, q, rot.c, rot.s, phase_conj);
    // Sweep-level convergence: reset at the first pair of each sweep.
    Value first = c.binary("and", c.compare(p, s64(c, 0), Compare::kEq), c.compare(q, s64(c, 1), Compare::kEq));
    Value so_far = c.select(first, c.zeros(c.type(w[2])), w[2]);
    Value worst = c.binary("maximum", so_far, batch_max(c, ratio));
    return std::vector<Value>{X, V, worst};
  }, unfinished);
  Value X = out[0], V = out[1];
  Value mx = modulus(b, X);
  Value s = b.unary("sqrt", reduce(b, b.binary("multiply", mx, mx), {r - 2}, ReduceKind::kSum));  // batch + [n]
  if (!uv) return {Value{}, sort_with(b, s, {}, true).first, Value{}};
  auto sorted = sort_with(b, s, {X, V}, true);
  s = sorted.first;
  X = sorted.second[0];
  V = sorted.second[1];
  // U's columns: x_i / s_i, completed to orthonormal columns by QR (which
  // also covers s_i = 0); Q's columns take the phase of R's diagonal back.
  auto xd = b.dims(X);
  auto smap = all_dims(r - 2);
  smap.push_back(r - 1);
  Value sd = b.broadcast_in_dim(s, xd, smap);
  Value positive = b.compare(sd, b.zeros(b.type(sd)), Compare::kGt);
  Value u0 = b.select(positive, b.binary("divide", X, as_type_of(b, b.select(positive, sd, fill(b, 1.0, rt, xd)), t)),
                      b.zeros(b.type(X)));
  Packed f = geqrf(b, u0);
  int64_t cols = full ? m : n;
  Value q = apply_q(b, block(b, f.a, m, n), f.tau, block(b, eye(b, t, with(batch, {m, m})), m, cols), true, false);
  Value rdiag = diagonal(b, block(b, f.a, n, n));  // batch + [n]
  Value rmag = modulus(b, rdiag);
  Value nonzero = b.compare(rmag, b.zeros(b.type(rmag)), Compare::kGt);
  Value ph = b.select(nonzero, b.binary("divide", rdiag, as_type_of(b, b.select(nonzero, rmag, fill(b, 1.0, rt, b.dims(rmag))), t)),
                      as_type_of(b, fill(b, 1.0, rt, b.dims(rmag)), t));
  if (cols > n) {
    auto pad_to = b.dims(ph);
    std::vector<int64_t> low(pad_to.size(), 0), high(pad_to.size(), 0), interior(pad_to.size(), 0);
    high.back() = cols - n;
    ph = b.pad(ph, as_type_of(b, b.constant(1.0, rt), t), low, high, interior);
  }
  auto qd = b.dims(q);
  Value u = b.binary("multiply", q, b.broadcast_in_dim(ph, qd, smap));
  return {u, s, adjoint(b, V)};
}

}  // namespace

Svd svd(Builder& b, Value a, bool full_matrices, bool compute_uv) {
  auto d = b.dims(a);
  bool wide = d[d.size() - 2] < d.back();
  Svd s = svd_tall(b, wide ? adjoint(b, a) : a, full_matrices, compute_uv);
  // A^H = U' S V'^H, so A = V' S U'^H.
  if (wide && compute_uv) return {adjoint(b, s.vh), s.s, adjoint(b, s.u)};
  return s;
}

namespace {

void check_svd_input(LoweringContext& ctx, const char* op) {
  c10::ScalarType type = ctx.dtype(0);
  TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type), op,
              ": Expected a floating point or complex tensor as input. Got ", type);
  TORCH_CHECK(ctx.b.type(ctx.tensor(0)).rank() >= 2, op, ": The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                                  type == at::kComplexDouble,
                              "\"linalg_svd_cpu\" not implemented for '", c10::toString(type), "'");
}

LoweringRegistrar registrar([] {
  // _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors)
  register_lowering("aten::_linalg_eigh", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value a = ctx.tensor(0);
    auto d = b.dims(a);
    std::string uplo = ctx.ivalue(1).toStringRef();
    TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u",
                "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
    TORCH_CHECK(d.size() >= 2, "linalg.eigh: The input tensor A must have at least 2 dimensions.");
    TORCH_CHECK(d[d.size() - 2] == d.back(), "linalg.eigh: A must be batches of square matrices, but they are ",
                d[d.size() - 2], " by ", d.back(), " matrices");
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                                    type == at::kComplexDouble,
                                "\"linalg_eigh_cpu\" not implemented for '", c10::toString(type), "'");
    bool vectors = ctx.bool_arg(2);
    Eigh e = eigh(b, a, uplo == "L" || uplo == "l", vectors);
    Value v = vectors ? e.vectors : b.zeros(TensorType{b.element_type(a), {0}});
    return std::vector<Value>{e.values, v};
  }, {"aten::_linalg_eigh.eigenvalues"});

  // _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh)
  register_lowering("aten::_linalg_svd", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_svd_input(ctx, "linalg.svd");
    TORCH_CHECK(ctx.is_none(3), "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA "
                "inputs with cuSOLVER backend.");
    Value a = ctx.tensor(0);
    bool uv = ctx.bool_arg(2);
    Svd s = svd(b, a, ctx.bool_arg(1), uv);
    if (!uv) {
      Value none = b.zeros(TensorType{b.element_type(a), {0}});
      return std::vector<Value>{none, s.s, none};
    }
    return std::vector<Value>{s.u, s.s, s.vh};
  }, {"aten::_linalg_svd.U"});
});

}  // namespace
}  // namespace torch_pjrt::ops
