// Linear algebra on the device: the Cholesky factorisation (Transformers'
// resize_token_embeddings draws new rows from a MultivariateNormal, which
// factors the covariance), what is solved with a Cholesky factor
// (cholesky_solve, cholesky_inverse), and triangular solves.
#include <c10/util/Exception.h>

#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

void check_linalg_dtype(c10::ScalarType type, const char* op) {
  TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type), op,
              ": Expected a floating point or complex tensor as input. Got ", type);
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble, op, ": ", type,
                              " is not supported on tpu (float32 and float64 are)");
}

// Keeps the lower (or upper) triangle of the last two dims, zeros the rest.
Value triangle(Builder& b, Value x, bool lower) {
  auto dims = b.dims(x);
  int64_t r = static_cast<int64_t>(dims.size());
  TensorType idx{ElementType::kS64, dims};
  Value row = b.iota(idx, r - 2), col = b.iota(idx, r - 1);
  Value keep = b.compare(row, col, lower ? hlo::Compare::kGe : hlo::Compare::kLe);
  return b.select(keep, x, b.zeros(b.type(x)));
}

// The factor (zeros in the other triangle) and info, as batch-shaped s32:
// 0, or k when the leading minor of order k is not positive-definite. XLA's
// factorisation turns a failed matrix into NaN, so info is the first NaN or
// non-positive entry on the diagonal: nonzero exactly when torch's is, but
// for a failed matrix it may name an earlier order than torch's LAPACK does.
struct Cholesky {
  Value factor, info, all_ok;
};

Cholesky cholesky(LoweringContext& ctx, const char* op, bool upper) {
  Builder& b = ctx.b;
  check_linalg_dtype(ctx.dtype(0), op);
  Value a = ctx.tensor(0);
  auto dims = b.dims(a);
  TORCH_CHECK(dims.size() >= 2, op, ": The input tensor A must have at least 2 dimensions.");
  int64_t r = static_cast<int64_t>(dims.size()), n = dims[r - 1];
  TORCH_CHECK(dims[r - 2] == n, op, ": A must be batches of square matrices, but they are ",
              dims[r - 2], " by ", n, " matrices");
  std::vector<int64_t> batch(dims.begin(), dims.end() - 2);
  TensorType info_type{ElementType::kS32, batch};
  if (n == 0) return {a, b.zeros(info_type), b.constant_bool(true)};
  Value factor = triangle(b, b.cholesky(a, !upper), !upper);
  // The diagonal, as batch + [n], through a masked sum.
  TensorType idx{ElementType::kS64, dims};
  Value on_diag = b.compare(b.iota(idx, r - 2), b.iota(idx, r - 1), hlo::Compare::kEq);
  Value diag = reduce(b, b.select(on_diag, factor, b.zeros(b.type(factor))), {r - 1}, ReduceKind::kSum);
  std::vector<int64_t> diag_dims = batch;
  diag_dims.push_back(n);
  Value bad = b.binary("or", b.compare(diag, diag, hlo::Compare::kNe),
                       b.compare(diag, b.zeros(b.type(diag)), hlo::Compare::kLe));
  Value order = b.binary("add", b.iota(TensorType{ElementType::kS32, diag_dims}, r - 2),
                         b.splat(b.constant_int(1, ElementType::kS32), diag_dims));
  Value none = b.splat(b.constant_int(n + 1, ElementType::kS32), diag_dims);
  Value first = reduce(b, b.select(bad, order, none), {r - 2}, ReduceKind::kMin);
  Value failed = b.compare(first, b.splat(b.constant_int(n + 1, ElementType::kS32), batch),
                           hlo::Compare::kNe);
  Value info = b.select(failed, first, b.zeros(info_type));
  std::vector<int64_t> all;
  for (int64_t i = 0; i < static_cast<int64_t>(batch.size()); ++i) all.push_back(i);
  Value ok = b.unary("not", failed);
  return {factor, info, all.empty() ? ok : reduce(b, ok, all, ReduceKind::kAnd)};
}

// Solves op(a) x = rhs with triangular a, op the conjugate transpose when
// `adjoint` (the builder's transpose is the plain one: conjugate around it).
Value tri_solve(Builder& b, Value a, Value rhs, bool lower, bool unit, bool adjoint_a) {
  if (!adjoint_a || !hlo::is_complex(b.element_type(a))) {
    return b.triangular_solve(a, rhs, true, lower, unit, adjoint_a);
  }
  return conj(b, b.triangular_solve(a, conj(b, rhs), true, lower, unit, true));
}

// x with (L L^H) x = rhs (lower) or (U^H U) x = rhs, a and rhs batched alike.
Value cholesky_solve(Builder& b, Value factor, Value rhs, bool upper) {
  factor = triangle(b, factor, !upper);
  if (upper) return tri_solve(b, factor, tri_solve(b, factor, rhs, false, false, true), false, false, false);
  return tri_solve(b, factor, tri_solve(b, factor, rhs, true, false, false), true, false, true);
}

void check_square(Builder& b, Value a, const char* prefix) {
  auto d = b.dims(a);
  TORCH_CHECK(d.size() >= 2, prefix, "The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(d[d.size() - 2] == d.back(), prefix, "A must be batches of square matrices, but they are ",
              d[d.size() - 2], " by ", d.back(), " matrices");
}

void check_kernel_dtype(c10::ScalarType type, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                                  type == at::kComplexDouble,
                              "\"", kernel, "\" not implemented for '", c10::toString(type), "'");
}

constexpr const char* kNotPositiveDefinite =
    ": The factorization could not be completed because the input is not positive-definite.";

LoweringRegistrar registrar([] {
  // linalg_cholesky_ex(self, upper, check_errors) -> (L, info); with
  // check_errors a failure raises at the next host wait, the way device-side
  // checks do (linalg.cholesky itself reads info on the host and raises).
  register_lowering("aten::linalg_cholesky_ex", [](LoweringContext& ctx) {
    Cholesky c = cholesky(ctx, "linalg.cholesky", ctx.bool_arg(1));
    if (ctx.bool_arg(2)) {
      ctx.require(c.all_ok, std::string("linalg.cholesky") + kNotPositiveDefinite, /*index_error=*/false);
    }
    return std::vector<Value>{c.factor, c.info};
  }, {"aten::linalg_cholesky_ex.L"});
  // cholesky(self, upper): the deprecated spelling, which always checks.
  register_lowering("aten::cholesky", [](LoweringContext& ctx) {
    Cholesky c = cholesky(ctx, "cholesky", ctx.bool_arg(1));
    ctx.require(c.all_ok, std::string("cholesky") + kNotPositiveDefinite, /*index_error=*/false);
    return std::vector<Value>{c.factor};
  }, {"aten::cholesky.out"});

  // linalg_solve_triangular(self (A), B, *, upper, left, unitriangular)
  register_lowering("aten::linalg_solve_triangular", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_linalg_dtype(ctx.dtype(0), "linalg.solve_triangular");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "linalg.solve_triangular: Expected A and B to have the "
                "same dtype, but found A of type ", ctx.dtype(0), " and B of type ", ctx.dtype(1), " instead");
    Value a = ctx.tensor(0), rhs = ctx.tensor(1);
    auto da = b.dims(a), db = b.dims(rhs);
    TORCH_CHECK(da.size() >= 2 && db.size() >= 2,
                "linalg.solve_triangular: The input tensor A must have at least 2 dimensions.");
    int64_t n = da.back();
    TORCH_CHECK(da[da.size() - 2] == n, "linalg.solve_triangular: A must be batches of square matrices");
    bool upper = ctx.bool_arg(2), left = ctx.bool_arg(3), unit = ctx.bool_arg(4);
    TORCH_CHECK((left ? db[db.size() - 2] : db.back()) == n,
                "linalg.solve_triangular: Incompatible shapes of A and B for the equation ",
                left ? "AX = B" : "XA = B");
    std::vector<int64_t> ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
    std::vector<int64_t> batch = broadcast_shape(ba, bb);
    auto with = [&](std::vector<int64_t> lead, int64_t x, int64_t y) {
      lead.push_back(x);
      lead.push_back(y);
      return lead;
    };
    a = broadcast_to(b, a, with(batch, n, n));
    rhs = broadcast_to(b, rhs, with(batch, db[db.size() - 2], db.back()));
    // Only A's own triangle is read, as in torch.
    a = triangle(b, a, !upper);
    return std::vector<Value>{b.triangular_solve(a, rhs, left, !upper, unit, false)};
  }, {"aten::linalg_solve_triangular.out"});
  // triangular_solve(B, A, upper, transpose, unitriangular) -> (X, A):
  // op(A) X = B with A's batch broadcast against B's; the second result is
  // that broadcast copy of A.
  register_lowering("aten::triangular_solve", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value rhs = ctx.tensor(0), a = ctx.tensor(1);
    check_square(b, a, "");
    auto da = b.dims(a), db = b.dims(rhs);
    TORCH_CHECK(db.size() >= 2, "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has ",
                db.size(), " dimensions instead");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "Expected b and A to have the same dtype, but found b of type ",
                ctx.dtype(0), " and A of type ", ctx.dtype(1), " instead.");
    int64_t n = da.back();
    TORCH_CHECK(db[db.size() - 2] == n, "Incompatible matrix sizes for triangular_solve: each A matrix is ", n,
                " by ", n, " but each b matrix is ", db[db.size() - 2], " by ", db.back());
    check_kernel_dtype(ctx.dtype(0), "triangular_solve_cpu");
    bool upper = ctx.bool_arg(2), transpose = ctx.bool_arg(3), unit = ctx.bool_arg(4);
    auto batch = broadcast_shape(batch_of(b, a, 2), batch_of(b, rhs, 2));
    a = broadcast_batch(b, a, batch, 2);
    rhs = broadcast_batch(b, rhs, batch, 2);
    Value x = b.triangular_solve(triangle(b, a, !upper), rhs, true, !upper, unit, transpose);
    return std::vector<Value>{x, a};
  }, {"aten::triangular_solve.X"});

  // _cholesky_solve_helper(B, factor, upper): cholesky_solve after it has
  // broadcast both.
  register_lowering("aten::_cholesky_solve_helper", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_kernel_dtype(ctx.dtype(0), "cholesky_solve_cpu");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "Expected b and A to have the same dtype, but found b of type ",
                ctx.dtype(0), " and A of type ", ctx.dtype(1), " instead.");
    return std::vector<Value>{cholesky_solve(b, ctx.tensor(1), ctx.tensor(0), ctx.bool_arg(2))};
  }, {"aten::_cholesky_solve_helper.out"});

  // cholesky_inverse(factor, upper): (L L^H)^-1 or (U^H U)^-1.
  register_lowering("aten::cholesky_inverse", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value f = ctx.tensor(0);
    check_square(b, f, "cholesky_inverse: ");
    check_kernel_dtype(ctx.dtype(0), "cholesky_inverse_out_cpu");
    return std::vector<Value>{cholesky_solve(b, f, eye(b, b.element_type(f), b.dims(f)), ctx.bool_arg(1))};
  }, {"aten::cholesky_inverse.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
