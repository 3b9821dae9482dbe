// linalg.lstsq on the device, every driver torch names on the CPU (gels,
// gelsy, gelsd, gelss; gels is the default off the CPU, as on CUDA). The
// solution is the minimum-norm least-squares one from the Jacobi SVD,
// singular values at or below rcond * the largest dropped:
//   x = V diag(1 / s) U^H b.
// What each driver reports follows the CPU: gels the residuals (m > n),
// gelsy the rank, gelsd and gelss the rank, the singular values and the
// residuals (m > n). One difference is data-dependent: for a rank-deficient
// A, gelsd and gelss on the CPU return no residuals (their shape depends on
// the values); here they are the residuals of the minimum-norm solution.
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "ops/jacobi.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

LoweringRegistrar registrar([] {
  // linalg_lstsq(A, B, rcond, driver) -> (solution, residuals, rank, singular_values)
  register_lowering("aten::linalg_lstsq", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    const char* op = "torch.linalg.lstsq";
    Value a = ctx.tensor(0), rhs = ctx.tensor(1);
    auto ad = b.dims(a), bd = b.dims(rhs);
    TORCH_CHECK(ad.size() >= 2, op, ": input must have at least 2 dimensions.");
    TORCH_CHECK(!bd.empty(), op, ": other must have at least 1 dimension.");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), op, ": Expected input and other to have the same dtype, but got "
                "input's dtype ", ctx.dtype(0), " and other's dtype ", ctx.dtype(1));
    TORCH_CHECK(ad.size() >= bd.size() && ad.size() - bd.size() <= 1, op,
                ": input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1");
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(type == at::kFloat || type == at::kDouble || type == at::kComplexFloat ||
                    type == at::kComplexDouble,
                "This function doesn't handle types other than float and double");
    std::string driver = ctx.is_none(3) ? "gels" : ctx.ivalue(3).toStringRef();
    TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss", op,
                ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
    bool vector = bd.size() + 1 == ad.size();
    if (vector) {
      bd.push_back(1);
      rhs = b.reshape(rhs, bd);
    }
    int64_t m = ad[ad.size() - 2], n = ad.back(), k = bd.back();
    TORCH_CHECK(bd[bd.size() - 2] == m, op, ": input.size(-2) should match other.size(-2)");
    auto batch = broadcast_shape(batch_of(b, a, 2), batch_of(b, rhs, 2));
    a = broadcast_batch(b, a, batch, 2);
    rhs = broadcast_batch(b, rhs, batch, 2);
    ElementType t = b.element_type(a);
    ElementType rt = real_type(b, a);
    int64_t r = static_cast<int64_t>(batch.size()) + 2, p = std::min(m, n);
    double eps = rt == ElementType::kF64 ? std::numeric_limits<double>::epsilon()
                                         : std::numeric_limits<float>::epsilon();
    double rcond = ctx.is_none(2) ? eps * static_cast<double>(std::max(m, n)) : ctx.double_arg(2);

    Svd f = svd(b, a, /*full_matrices=*/false, /*compute_uv=*/true);
    // Kept: s > rcond * max(s) (LAPACK's gelsd and gelss rule).
    auto sd = b.dims(f.s);  // batch + [p]
    Value top = p == 0 ? b.zeros(TensorType{rt, batch})
                       : reduce(b, f.s, {r - 2}, ReduceKind::kMax);
    Value cut = b.binary("multiply", b.broadcast_in_dim(top, sd, all_dims(r - 2)),
                         b.splat(b.constant(rcond, rt), sd));
    Value keep = b.compare(f.s, cut, Compare::kGt);
    Value one = b.splat(b.constant(1.0, rt), sd);
    Value inv = b.select(keep, b.binary("divide", one, b.select(keep, f.s, one)), b.zeros(b.type(f.s)));
    // x = V diag(inv) U^H b
    Value uhb = batched_matmul(b, adjoint(b, f.u), rhs);  // batch + [p, k]
    auto umap = all_dims(r - 2);
    umap.push_back(r - 2);
    Value scaled = b.binary("multiply", uhb, b.convert(b.broadcast_in_dim(inv, b.dims(uhb), umap), t));
    Value x = batched_matmul(b, adjoint(b, f.vh), scaled);  // batch + [n, k]

    Value none_real = b.zeros(TensorType{rt, {0}});
    Value residuals = none_real;
    if (m > n && driver != "gelsy") {
      Value res = b.binary("subtract", batched_matmul(b, a, x), rhs);
      Value mag = modulus(b, res);
      residuals = reduce(b, b.binary("multiply", mag, mag), {r - 2}, ReduceKind::kSum);
    }
    Value rank = b.zeros(TensorType{ElementType::kS64, {0}});
    if (driver != "gels") rank = reduce(b, b.convert(keep, ElementType::kS64), {r - 2}, ReduceKind::kSum);
    Value singular = driver == "gelsd" || driver == "gelss" ? f.s : none_real;
    if (vector) {
      auto xd = b.dims(x);
      x = b.reshape(x, std::vector<int64_t>(xd.begin(), xd.end() - 1));
    }
    return std::vector<Value>{x, residuals, rank, singular};
  }, {"aten::linalg_lstsq.out"}, /*static_scalars=*/{2});
});

}  // namespace
}  // namespace torch_pjrt::ops
