// Order statistics along a dim: kthvalue, median and nanmedian (with and
// without a dim) and mode. Each sorts the slice (stable, NaN last, carrying
// the original positions) and reads one sorted position per slice: a fixed
// one (kthvalue), one the data decides (median with NaN present, nanmedian)
// or the end of the longest run of equal values (mode). Indices follow
// torch's CPU kernels where it pins them: median's NaN is the first NaN,
// mode's index is the last occurrence of the value.
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "ops/helpers.h"
#include "ops/ordering.h"

namespace torch_pjrt::ops {
namespace {

struct Sorted {
  Value values;   // ascending, NaN last
  Value indices;  // s64 positions in the input
  int64_t dim = 0;
  std::vector<int64_t> dims;
  ElementType type{};  // of the input (bool sorts as u8)
};

Sorted sort_along(Builder& b, Value x, int64_t dim) {
  Sorted s;
  s.type = b.element_type(x);
  if (s.type == ElementType::kPred) x = b.convert(x, ElementType::kU8);
  s.dim = dim;
  s.dims = b.dims(x);
  Value idx = b.iota(TensorType{ElementType::kS64, s.dims}, dim);
  auto out = b.sort({x, idx}, dim, /*stable=*/true, nan_last_order(false, hlo::is_float(s.type)));
  s.values = out[0];
  s.indices = out[1];
  return s;
}

std::vector<int64_t> without(const std::vector<int64_t>& dims, int64_t dim) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (static_cast<int64_t>(i) != dim) out.push_back(dims[i]);
  }
  return out;
}

// Sums `x` (one non-zero entry per slice) along the dim.
Value sum_along(Builder& b, Value x, int64_t dim) {
  if (b.element_type(x) == ElementType::kPred) return reduce(b, x, {dim}, ReduceKind::kOr);
  return reduce(b, x, {dim}, ReduceKind::kSum);
}

// The sorted value and original index at position `pos` (s64, one per
// slice: the dims without `dim`) of each slice.
std::vector<Value> pick(Builder& b, const Sorted& s, Value pos) {
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(s.dims.size()); ++i) {
    if (i != s.dim) mapping.push_back(i);
  }
  Value at = b.compare(b.iota(TensorType{ElementType::kS64, s.dims}, s.dim),
                       b.broadcast_in_dim(pos, s.dims, mapping), hlo::Compare::kEq);
  Value v = b.select(at, s.values, b.zeros(b.type(s.values)));
  Value i = b.select(at, s.indices, b.zeros(b.type(s.indices)));
  Value value = sum_along(b, v, s.dim);
  if (s.type == ElementType::kPred) value = b.convert(value, ElementType::kPred);
  return {value, sum_along(b, i, s.dim)};
}

// The sorted position `k` of every slice (a static position).
std::vector<Value> pick_static(Builder& b, const Sorted& s, int64_t k) {
  int64_t rank = static_cast<int64_t>(s.dims.size());
  std::vector<int64_t> start(rank, 0), limit = s.dims, strides(rank, 1);
  start[s.dim] = k;
  limit[s.dim] = k + 1;
  auto out_dims = without(s.dims, s.dim);
  Value v = b.reshape(b.slice(s.values, start, limit, strides), out_dims);
  if (s.type == ElementType::kPred) v = b.convert(v, ElementType::kPred);
  return {v, b.reshape(b.slice(s.indices, start, limit, strides), out_dims)};
}

std::vector<Value> finish(Builder& b, std::vector<Value> out, const std::vector<int64_t>& in,
                          int64_t dim, bool keepdim) {
  if (keepdim) {
    for (Value& v : out) v = keep_dims(b, v, in, {dim});
  }
  return out;
}

Value count_not_nan(Builder& b, const Sorted& s) {
  Value ok = b.compare(s.values, s.values, hlo::Compare::kEq);
  return reduce(b, b.convert(ok, ElementType::kS64), {s.dim}, ReduceKind::kSum);
}

// median (ignore_nan=false) and nanmedian of the slices along `dim`.
std::vector<Value> median_along(Builder& b, Value x, int64_t dim, bool ignore_nan) {
  Sorted s = sort_along(b, x, dim);
  int64_t n = s.dims[dim];
  auto out_dims = without(s.dims, dim);
  auto splat = [&](int64_t v) { return b.splat(b.constant_int(v, ElementType::kS64), out_dims); };
  if (!hlo::is_float(s.type)) return pick_static(b, s, (n - 1) / 2);
  Value count = count_not_nan(b, s);
  Value pos;
  if (ignore_nan) {
    // The lower middle of the numbers; position 0 (a NaN) when all are NaN.
    Value middle = b.binary("divide", b.binary("subtract", count, splat(1)), splat(2));
    pos = b.select(b.compare(count, splat(0), hlo::Compare::kEq), splat(0), middle);
  } else {
    // Any NaN makes the median NaN: the first one, right after the numbers.
    pos = b.select(b.compare(count, splat(n), hlo::Compare::kLt), count, splat((n - 1) / 2));
  }
  return pick(b, s, pos);
}

// torch's CPU kernels for these take no bool.
void check_not_bool(LoweringContext& ctx, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.dtype(0) != at::kBool, "\"", kernel,
                              "\" not implemented for 'Bool'");
}

void check_nonempty(const char* op, const std::vector<int64_t>& in, int64_t dim) {
  TORCH_CHECK_INDEX(in.empty() || in[dim] > 0, op, "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
}

LoweringRegistrar registrar([] {
  // kthvalue(self, k, dim=-1, keepdim=False) -> (values, indices)
  register_lowering("aten::kthvalue", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_not_bool(ctx, "kthvalue_cpu");
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t k = ctx.int_arg(1);
    int64_t rank = static_cast<int64_t>(in.size());
    int64_t dim = wrap_dim(ctx.int_arg(2), std::max<int64_t>(rank, 1));
    TORCH_CHECK(k >= 1 && k <= (rank > 0 ? in[dim] : 1),
                "kthvalue(): selected number k out of range for dimension ", dim);
    if (rank == 0) return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
    return finish(b, pick_static(b, sort_along(b, x, dim), k - 1), in, dim, ctx.bool_arg(3));
  }, {"aten::kthvalue.values"});

  for (bool ignore_nan : {false, true}) {
    std::string name = ignore_nan ? "nanmedian" : "median";
    // median.dim(self, dim, keepdim=False) -> (values, indices)
    register_lowering("aten::" + name + ".dim", [ignore_nan, name](LoweringContext& ctx) {
      check_not_bool(ctx, "median_out");
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto in = b.dims(x);
      int64_t rank = static_cast<int64_t>(in.size());
      int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(rank, 1));
      if (rank == 0) return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
      check_nonempty(name.c_str(), in, dim);
      return finish(b, median_along(b, x, dim, ignore_nan), in, dim, ctx.bool_arg(2));
    }, {"aten::" + name + ".dim_values"});
    // median(self): of all elements; NaN for an empty tensor.
    register_lowering("aten::" + name, [ignore_nan](LoweringContext& ctx) {
      check_not_bool(ctx, "median_cpu");
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      int64_t n = b.type(x).numel();
      if (n == 0) {
        // NaN, converted as the CPU converts it: the lowest integer.
        ElementType t = b.element_type(x);
        if (hlo::is_float(t)) return std::vector<Value>{b.constant(NAN, t)};
        return std::vector<Value>{reduce_init(b, t, ReduceKind::kMax)};
      }
      return std::vector<Value>{median_along(b, b.reshape(x, {n}), 0, ignore_nan)[0]};
    }, {"aten::" + name + ".out"});
  }

  // mode(self, dim=-1, keepdim=False) -> (values, indices): the most frequent
  // value of each slice, the smallest among equally frequent ones.
  register_lowering("aten::mode", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t rank = static_cast<int64_t>(in.size());
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(rank, 1));
    if (rank == 0) return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
    check_nonempty("mode", in, dim);
    Sorted s = sort_along(b, x, dim);
    int64_t n = in[dim];
    std::vector<int64_t> start(rank, 0), limit = in, strides(rank, 1);
    limit[dim] = n - 1;
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    low[dim] = 1;
    // A run starts where the value differs from the one before it.
    Value prev = b.slice(s.values, start, limit, strides);
    Value differs = b.compare(b.slice(s.values, [&] {
                                std::vector<int64_t> st(rank, 0);
                                st[dim] = 1;
                                return st;
                              }(), in, strides), prev, hlo::Compare::kNe);
    if (hlo::is_float(s.type)) {
      // NaNs count as equal to each other here, as in torch's kernel.
      Value cur = b.slice(s.values, [&] {
        std::vector<int64_t> st(rank, 0);
        st[dim] = 1;
        return st;
      }(), in, strides);
      Value both_nan = b.binary("and", b.compare(cur, cur, hlo::Compare::kNe),
                                b.compare(prev, prev, hlo::Compare::kNe));
      differs = b.binary("and", differs, b.unary("not", both_nan));
    }
    Value starts = b.pad(differs, b.constant_bool(true), low, high, interior);
    Value pos = b.iota(TensorType{ElementType::kS64, in}, dim);
    Value zero = b.zeros(TensorType{ElementType::kS64, in});
    Value run_start = scan(b, b.select(starts, pos, zero), dim, "maximum", 0);
    Value length = b.binary("subtract", pos, run_start);
    Value longest = reduce(b, length, {dim}, ReduceKind::kMax);
    auto out_dims = without(in, dim);
    std::vector<int64_t> mapping;
    for (int64_t i = 0; i < rank; ++i) {
      if (i != dim) mapping.push_back(i);
    }
    Value is_longest = b.compare(length, b.broadcast_in_dim(longest, in, mapping), hlo::Compare::kEq);
    Value beyond = b.splat(b.constant_int(n, ElementType::kS64), in);
    Value first_end = reduce(b, b.select(is_longest, pos, beyond), {dim}, ReduceKind::kMin);
    return finish(b, pick(b, s, first_end), in, dim, ctx.bool_arg(2));
  }, {"aten::mode.values"});
});

}  // namespace
}  // namespace torch_pjrt::ops
