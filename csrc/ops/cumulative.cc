// Running extrema and log-sum-exp along a dim: cummax and cummin (value
// and index) and logcumsumexp, as log2(n) shifted combines (Hillis-Steele).
// cummax's combine is a max over (is NaN, value, position), so ties and NaN
// go to the later element as in torch's CPU loop, and the scan is exact.
#include <c10/util/Exception.h>

#include <cmath>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

struct Shifted {
  std::vector<int64_t> start, limit, strides, low, high, interior;
};

Shifted shift_by(const std::vector<int64_t>& dims, int64_t dim, int64_t shift) {
  int64_t rank = static_cast<int64_t>(dims.size());
  Shifted s{std::vector<int64_t>(rank, 0), dims, std::vector<int64_t>(rank, 1),
            std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 0),
            std::vector<int64_t>(rank, 0)};
  s.limit[dim] = dims[dim] - shift;
  s.low[dim] = shift;
  return s;
}

// (values, indices) running max (or min) along `dim`.
std::vector<Value> running_extreme(Builder& b, Value x, int64_t dim, bool is_max) {
  ElementType t = b.element_type(x);
  bool is_bool = t == ElementType::kPred;
  if (is_bool) x = b.convert(x, ElementType::kU8);
  ElementType vt = b.element_type(x);
  auto dims = b.dims(x);
  Value idx = b.iota(TensorType{ElementType::kS64, dims}, dim);
  Value pad_value = reduce_init(b, vt, is_max ? ReduceKind::kMax : ReduceKind::kMin);
  Value pad_index = b.constant_int(-1, ElementType::kS64);
  bool is_float = hlo::is_float(vt);
  for (int64_t shift = 1; shift < dims[dim]; shift *= 2) {
    Shifted s = shift_by(dims, dim, shift);
    Value pv = b.pad(b.slice(x, s.start, s.limit, s.strides), pad_value, s.low, s.high, s.interior);
    Value pi = b.pad(b.slice(idx, s.start, s.limit, s.strides), pad_index, s.low, s.high, s.interior);
    // The later element (x) wins when it is NaN, or neither is and it is at
    // least (most) the earlier one.
    Value later = b.compare(x, pv, is_max ? hlo::Compare::kGe : hlo::Compare::kLe);
    if (is_float) {
      Value x_nan = b.compare(x, x, hlo::Compare::kNe), p_nan = b.compare(pv, pv, hlo::Compare::kNe);
      later = b.binary("or", x_nan, b.binary("and", b.unary("not", p_nan), later));
    }
    x = b.select(later, x, pv);
    idx = b.select(later, idx, pi);
  }
  if (is_bool) x = b.convert(x, ElementType::kPred);
  return {x, idx};
}

Value log_add_exp(Builder& b, Value a, Value c) {
  Value m = b.binary("maximum", a, c);
  Value d = b.unary("negate", b.unary("abs", b.binary("subtract", a, c)));
  Value r = b.binary("add", m, b.unary("log_plus_one", b.unary("exponential", d)));
  // Equal infinities (both -inf: nothing summed yet) give themselves.
  Value same_inf = b.binary("and", b.compare(a, c, hlo::Compare::kEq),
                            b.compare(b.unary("abs", a), b.splat(b.constant(INFINITY, b.element_type(a)), b.dims(a)),
                                      hlo::Compare::kEq));
  return b.select(same_inf, a, r);
}

LoweringRegistrar registrar([] {
  for (bool is_max : {true, false}) {
    const char* name = is_max ? "aten::cummax" : "aten::cummin";
    register_lowering(name, [is_max](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto dims = b.dims(x);
      int64_t rank = static_cast<int64_t>(dims.size());
      int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(rank, 1));
      if (rank == 0) return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
      return running_extreme(b, x, dim, is_max);
    }, {std::string(name) + ".out"});
  }

  // _logcumsumexp(self, dim): log(cumsum(exp(x))) without overflow.
  register_lowering("aten::_logcumsumexp", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    TORCH_CHECK(c10::isFloatingType(type) || c10::isComplexType(type),
                "logcumsumexp(): Expected floating point type, but got ", type);
    TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(type), "logcumsumexp of complex tensors is not "
                                "lowered on tpu");
    Value x = convert(b, ctx.tensor(0), opmath_type(type));
    auto dims = b.dims(x);
    int64_t rank = static_cast<int64_t>(dims.size());
    if (rank == 0) return std::vector<Value>{convert(b, x, type)};
    int64_t dim = wrap_dim(ctx.int_arg(1), rank);
    Value lowest = b.constant(-INFINITY, b.element_type(x));
    for (int64_t shift = 1; shift < dims[dim]; shift *= 2) {
      Shifted s = shift_by(dims, dim, shift);
      Value earlier = b.pad(b.slice(x, s.start, s.limit, s.strides), lowest, s.low, s.high, s.interior);
      x = log_add_exp(b, earlier, x);
    }
    return std::vector<Value>{convert(b, x, type)};
  }, {"aten::_logcumsumexp.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
