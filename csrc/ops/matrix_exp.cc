// linalg.matrix_exp by scaling and squaring: each matrix is scaled by 2^-s
// so that its 1-norm is at most 1/2, the degree-18 Taylor polynomial of the
// exponential is evaluated in Horner form (truncation error below 1e-22
// there), and the result is squared s times, s chosen per matrix (a loop
// runs the batch's largest s; a matrix stops squaring at its own). Every
// dtype computes in float64 (complex128) and rounds once.
#include <c10/util/Exception.h>

#include <cmath>
#include <vector>

#include "ops/matrix.h"

namespace torch_pjrt::ops {
namespace {

using hlo::Compare;

constexpr int kDegree = 18;
constexpr int64_t kMaxSquarings = 1100;  // past float64's range: inf/NaN by then

LoweringRegistrar registrar([] {
  register_lowering("aten::linalg_matrix_exp", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type),
                "linalg.matrix_exp: Expected a floating point or complex tensor as input. Got ", type);
    Value a = ctx.tensor(0);
    auto d = b.dims(a);
    TORCH_CHECK(d.size() >= 2, "linalg.matrix_exp: The input tensor A must have at least 2 dimensions.");
    TORCH_CHECK(d[d.size() - 2] == d.back(), "linalg.matrix_exp: A must be batches of square matrices, but "
                "they are ", d[d.size() - 2], " by ", d.back(), " matrices");
    // The squarings double the relative error each time: float32 and
    // narrower compute in float64 (complex64 in complex128) to end within
    // float32's own rounding, as the CPU's result is.
    c10::ScalarType compute = c10::isComplexType(type) ? at::kComplexDouble : at::kDouble;
    a = convert(b, a, compute);
    ElementType t = b.element_type(a), rt = real_type(b, a);
    int64_t r = static_cast<int64_t>(d.size());
    std::vector<int64_t> batch(d.begin(), d.end() - 2);
    if (d.back() == 0) return std::vector<Value>{convert(b, a, type)};
    // s = max(0, ceil(log2(||A||_1 / 0.5))), per matrix (s64 batch).
    Value norm = reduce(b, reduce(b, modulus(b, a), {r - 2}, ReduceKind::kSum), {r - 2}, ReduceKind::kMax);
    Value ratio = b.binary("divide", norm, b.splat(b.constant(0.5, rt), batch));
    Value s = b.unary("ceil", b.binary("divide", b.unary("log", ratio), b.splat(b.constant(std::log(2.0), rt), batch)));
    s = b.binary("maximum", s, b.zeros(b.type(s)));
    // A NaN or infinite norm: no squaring (the polynomial carries the NaN).
    Value finite = b.compare(norm, b.splat(b.constant(INFINITY, rt), batch), Compare::kLt);
    s = b.select(finite, b.binary("minimum", s, b.splat(b.constant(static_cast<double>(kMaxSquarings), rt), batch)),
                 b.zeros(b.type(s)));
    Value scale = b.unary("exponential", b.binary("multiply", b.unary("negate", s),
                                                   b.splat(b.constant(std::log(2.0), rt), batch)));
    Value scaled = b.binary("multiply", a, b.convert(b.broadcast_in_dim(scale, d, all_dims(r - 2)), t));
    // Horner: E = I + A (I + A/2 (I + A/3 (... (I + A/18)))).
    Value eye_t = eye(b, t, d);
    Value e = eye_t;
    for (int k = kDegree; k >= 1; --k) {
      Value term = batched_matmul(b, scaled, e);
      term = b.binary("multiply", term, b.splat(b.constant(1.0 / k, t), d));
      e = b.binary("add", eye_t, term);
    }
    // Square each matrix its own s times.
    Value steps = b.convert(s, ElementType::kS64);
    Value most = reduce(b, steps, all_dims(r - 2), ReduceKind::kMax);
    auto out = b.while_loop(
        {b.constant_int(0, ElementType::kS64), most, steps, e},
        [](Builder& c, const std::vector<Value>& v) {
          return std::vector<Value>{c.compare(v[0], v[1], Compare::kLt)};
        },
        [r](Builder& c, const std::vector<Value>& v) {
          Value i = v[0], E = v[3];
          auto bd = c.dims(v[2]);
          Value go = c.compare(c.splat(i, bd), v[2], Compare::kLt);
          Value sq = batched_matmul(c, E, E);
          Value next = c.select(c.broadcast_in_dim(go, c.dims(E), all_dims(r - 2)), sq, E);
          return std::vector<Value>{c.binary("add", i, c.constant_int(1, ElementType::kS64)), v[1], v[2], next};
        });
    return std::vector<Value>{convert(b, out[3], type)};
  }, {"aten::linalg_matrix_exp.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
