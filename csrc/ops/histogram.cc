// histc: counts of values in equal-width bins, for every real dtype
// accelerators accept, integers included (CPU PyTorch refuses integers;
// mixture-of-experts routing counts its int32 expert ids with it). The
// counting is one scatter-add into the bins, with one spare slot that
// collects the values outside the range.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value histc(LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  c10::ScalarType dtype = ctx.dtype(0);
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != c10::kBool && !c10::isComplexType(dtype),
                              "\"histogram_tpu\" not implemented for '", c10::toString(dtype), "'");
  int64_t bins = ctx.int_arg(1);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  double min = ctx.double_arg(2), max = ctx.double_arg(3);
  TORCH_CHECK(!(min > max), "torch.histc: max must be larger than min");

  // Positions are worked out in the float type CPU uses for floats, and in
  // f64 for integers (exact for the counts and ids this is used on).
  c10::ScalarType math = c10::isFloatingType(dtype) ? opmath_type(dtype) : c10::kDouble;
  ElementType mt = et(math);
  int64_t n = b.type(x).numel();
  Value flat = convert(b, b.reshape(x, {n}), math);
  Value lo = b.constant(min, mt), hi = b.constant(max, mt);
  if (min == max) {
    // The data's own range, widened by one each way when it is a point.
    if (n > 0) {
      lo = reduce(b, flat, {0}, ReduceKind::kMin);
      hi = reduce(b, flat, {0}, ReduceKind::kMax);
      // v - v is 0 exactly when v is finite (inf and nan give nan).
      Value spread = b.binary("add", b.binary("subtract", lo, lo), b.binary("subtract", hi, hi));
      Value finite = b.compare(spread, b.constant(0.0, mt), hlo::Compare::kEq);
      ctx.require(finite, "torch.histc: range of the input is not finite (it holds inf or nan)",
                  /*index_error=*/false);
    }
    Value one = b.constant(1.0, mt);
    Value point = b.compare(lo, hi, hlo::Compare::kEq);
    lo = b.select(point, b.binary("subtract", lo, one), lo);
    hi = b.select(point, b.binary("add", hi, one), hi);
  }
  Value out_counts;
  ElementType count_type = c10::isFloatingType(dtype) ? mt : ElementType::kS64;
  if (n == 0) {
    out_counts = b.zeros(TensorType{count_type, {bins}});
  } else {
    std::vector<int64_t> dims{n};
    Value lo_n = b.splat(lo, dims), hi_n = b.splat(hi, dims);
    // pos = (x - lo) * bins / (hi - lo), the top edge belonging to the last bin.
    Value scaled = b.binary("divide",
                            b.binary("multiply", b.binary("subtract", flat, lo_n),
                                     b.splat(b.constant(static_cast<double>(bins), mt), dims)),
                            b.binary("subtract", hi_n, lo_n));
    Value pos = b.convert(b.unary("floor", scaled), ElementType::kS64);
    Value last = b.splat(b.constant_int(bins - 1, ElementType::kS64), dims);
    pos = b.select(b.compare(pos, last, hlo::Compare::kGt), last, pos);
    Value inside = b.binary("and", b.compare(flat, lo_n, hlo::Compare::kGe),
                            b.compare(flat, hi_n, hlo::Compare::kLe));
    Value spare = b.splat(b.constant_int(bins, ElementType::kS64), dims);
    Value slot = b.reshape(b.select(inside, pos, spare), {n, 1});
    Value ones = b.splat(b.constant(1.0, count_type), dims);
    Builder::ScatterDims sd{{}, {0}, {0}, 1};
    Value counts = b.scatter(b.zeros(TensorType{count_type, {bins + 1}}), slot, ones, sd,
                             [](Builder& r, const std::vector<Value>& a) {
                               return std::vector<Value>{r.binary("add", a[0], a[1])};
                             });
    out_counts = b.slice(counts, {0}, {bins}, {1});
  }
  return b.convert(out_counts, et(dtype));
}

LoweringRegistrar registrar([] {
  // histc(self, bins, min, max): min and max decide the program (a data
  // range when equal), so they are static.
  register_lowering("aten::histc", [](LoweringContext& ctx) {
    return std::vector<Value>{histc(ctx)};
  }, {"aten::histc.out"}, /*static_scalars=*/{2, 3});
});

}  // namespace
}  // namespace torch_pjrt::ops
