// Miscellaneous tensor ops: isnan/isinf family, nan_to_num, tril/triu,
// cumsum/cumprod, flip, roll, sort and topk.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "ops/helpers.h"
#include "ops/ordering.h"

namespace torch_pjrt::ops {
namespace {

Value float_check(Builder& b, Value x, const std::function<Value(Value)>& fn) {
  if (!hlo::is_float(b.element_type(x))) {
    return b.splat(b.constant_bool(false), b.dims(x));
  }
  return fn(x);
}

Value is_nan(Builder& b, Value x) { return b.compare(x, x, hlo::Compare::kNe); }

Value equals_value(Builder& b, Value x, double v) {
  return b.compare(x, b.splat(b.constant(v, b.element_type(x)), b.dims(x)), hlo::Compare::kEq);
}

LoweringRegistrar registrar([] {
  register_lowering("aten::isnan", [](LoweringContext& ctx) {
    return std::vector<Value>{float_check(ctx.b, ctx.tensor(0), [&](Value x) { return is_nan(ctx.b, x); })};
  }, {"aten::isnan.out"});
  register_lowering("aten::isinf", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    return std::vector<Value>{float_check(b, ctx.tensor(0), [&](Value x) {
      return equals_value(b, b.unary("abs", x), INFINITY);
    })};
  }, {"aten::isinf.out"});
  register_lowering("aten::isposinf", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    return std::vector<Value>{float_check(b, ctx.tensor(0), [&](Value x) { return equals_value(b, x, INFINITY); })};
  }, {"aten::isposinf.out"});
  register_lowering("aten::isneginf", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    return std::vector<Value>{float_check(b, ctx.tensor(0), [&](Value x) { return equals_value(b, x, -INFINITY); })};
  }, {"aten::isneginf.out"});
  register_lowering("aten::isfinite", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    if (!hlo::is_float(b.element_type(x))) return std::vector<Value>{b.splat(b.constant_bool(true), b.dims(x))};
    Value inf = b.splat(b.constant(INFINITY, b.element_type(x)), b.dims(x));
    return std::vector<Value>{b.compare(b.unary("abs", x), inf, hlo::Compare::kLt)};
  });
  register_lowering("aten::nan_to_num", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    ElementType t = b.element_type(x);
    if (!hlo::is_float(t)) return std::vector<Value>{x};
    auto dims = b.dims(x);
    double big = t == ElementType::kF64 ? std::numeric_limits<double>::max()
                 : t == ElementType::kF32 ? std::numeric_limits<float>::max()
                 : t == ElementType::kBF16 ? 3.3895313892515355e38
                                           : 65504.0;
    Value nan = ctx.is_none(1) ? b.zeros(TensorType{t, dims}) : b.splat(b.constant(ctx.double_arg(1), t), dims);
    Value pos = b.splat(b.constant(ctx.is_none(2) ? big : ctx.double_arg(2), t), dims);
    Value neg = b.splat(b.constant(ctx.is_none(3) ? -big : ctx.double_arg(3), t), dims);
    Value r = b.select(is_nan(b, x), nan, x);
    r = b.select(equals_value(b, x, INFINITY), pos, r);
    r = b.select(equals_value(b, x, -INFINITY), neg, r);
    return std::vector<Value>{r};
  }, {"aten::nan_to_num_", "aten::nan_to_num.out"}, {1, 2, 3});

  for (bool lower : {true, false}) {
    std::string name = lower ? "tril" : "triu";
    register_lowering("aten::" + name, [lower](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto dims = b.dims(x);
      TORCH_CHECK(dims.size() >= 2, lower ? "tril" : "triu",
                  ": input tensor must have at least 2 dimensions");
      int64_t r = static_cast<int64_t>(dims.size());
      TensorType idx{ElementType::kS64, dims};
      Value row = b.iota(idx, r - 2), col = b.iota(idx, r - 1);
      Value diag = b.binary("add", row, b.splat(b.constant_int(ctx.int_arg(1), ElementType::kS64), dims));
      Value keep = b.compare(col, diag, lower ? hlo::Compare::kLe : hlo::Compare::kGe);
      return std::vector<Value>{b.select(keep, x, b.zeros(b.type(x)))};
    }, {"aten::" + name + "_", "aten::" + name + ".out"});
  }

  for (bool sum : {true, false}) {
    std::string name = sum ? "cumsum" : "cumprod";
    register_lowering("aten::" + name, [sum](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      c10::ScalarType in = ctx.dtype(0);
      c10::ScalarType out = ctx.optional_dtype(2).value_or(
          c10::isIntegralType(in, true) ? at::kLong : in);
      if (b.type(x).rank() == 0) {
        wrap_dim(ctx.int_arg(1), 1);
        return std::vector<Value>{convert(b, x, out)};
      }
      int64_t dim = wrap_dim(ctx.int_arg(1), b.type(x).rank());
      Value v = convert(b, x, opmath_type(out));
      Value r = scan(b, v, dim, sum ? "add" : "multiply", sum ? 0.0 : 1.0);
      return std::vector<Value>{convert(b, r, out)};
    }, {"aten::" + name + "_", "aten::" + name + ".out"});
  }

  // linalg_cross(self, other, dim): the 3-vector cross product along dim.
  register_lowering("aten::linalg_cross", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, type);
    auto dims = b.dims(xs[0]);
    int64_t dim = wrap_dim(ctx.int_arg(2), static_cast<int64_t>(dims.size()));
    TORCH_CHECK(dims[dim] == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
                dims[dim], " and ", dims[dim]);
    auto part = [&](Value v, int64_t i) {
      std::vector<int64_t> lo(dims.size(), 0), hi = dims, st(dims.size(), 1);
      lo[dim] = i;
      hi[dim] = i + 1;
      return b.slice(v, lo, hi, st);
    };
    auto term = [&](int64_t i, int64_t j) {
      return b.binary("subtract", b.binary("multiply", part(xs[0], i), part(xs[1], j)),
                      b.binary("multiply", part(xs[0], j), part(xs[1], i)));
    };
    return std::vector<Value>{b.concatenate({term(1, 2), term(2, 0), term(0, 1)}, dim)};
  }, {"aten::linalg_cross.out"});

  // searchsorted(sorted, values, out_int32, right, side, sorter): the count
  // of boundaries below (or not above) each value, along the last dim.
  auto searchsorted = [](LoweringContext& ctx, Value boundaries, Value values, bool out_int32, bool right) {
    Builder& b = ctx.b;
    c10::ScalarType type = c10::promoteTypes(ctx.dtype(0), ctx.dtype(1));
    boundaries = convert(b, boundaries, type);
    values = convert(b, values, type);
    auto bd = b.dims(boundaries), vd = b.dims(values);
    int64_t m = bd.back();
    std::vector<int64_t> full = vd;
    full.push_back(m);
    std::vector<int64_t> vmap, bmap;
    for (size_t i = 0; i < vd.size(); ++i) vmap.push_back(static_cast<int64_t>(i));
    Value v = b.broadcast_in_dim(values, full, vmap);
    if (bd.size() == 1) {
      bmap = {static_cast<int64_t>(full.size()) - 1};
    } else {
      TORCH_CHECK(bd.size() == vd.size(), "torch.searchsorted(): boundaries tensor should be 1 dimension or "
                  "the first N-1 dimensions of boundaries tensor and input value tensor must match");
      for (size_t i = 0; i < bd.size() - 1; ++i) bmap.push_back(static_cast<int64_t>(i));
      bmap.push_back(static_cast<int64_t>(full.size()) - 1);
    }
    Value bb = b.broadcast_in_dim(boundaries, full, bmap);
    Value below = b.compare(bb, v, right ? hlo::Compare::kLe : hlo::Compare::kLt);
    Value count = reduce(b, b.convert(below, ElementType::kS64), {static_cast<int64_t>(full.size()) - 1}, ReduceKind::kSum);
    return b.convert(count, out_int32 ? ElementType::kS32 : ElementType::kS64);
  };
  register_lowering("aten::searchsorted.Tensor", [searchsorted](LoweringContext& ctx) {
    bool right = ctx.bool_arg(3);
    if (!ctx.is_none(4)) right = ctx.ivalue(4).toStringRef() == "right";
    Builder& b = ctx.b;
    Value boundaries = ctx.tensor(0);
    if (!ctx.is_none(5) && b.type(boundaries).numel() > 0) {
      // sorter orders the boundaries along the last dim.
      auto bd = b.dims(boundaries);
      int64_t rank = static_cast<int64_t>(bd.size());
      std::vector<int64_t> coords_dims = bd;
      std::vector<Value> parts;
      Value sorter = b.convert(ctx.tensor(5), ElementType::kS64);
      for (int64_t d = 0; d < rank; ++d) {
        Value c = d == rank - 1 ? sorter : b.iota(TensorType{ElementType::kS64, bd}, d);
        auto with_one = bd;
        with_one.push_back(1);
        parts.push_back(b.reshape(c, with_one));
      }
      std::vector<int64_t> all;
      for (int64_t d = 0; d < rank; ++d) all.push_back(d);
      Builder::GatherDims g{{}, all, all, rank};
      boundaries = b.gather(boundaries, b.concatenate(parts, rank), g, std::vector<int64_t>(rank, 1), bd);
    }
    return std::vector<Value>{searchsorted(ctx, boundaries, ctx.tensor(1), ctx.bool_arg(2), right)};
  }, {"aten::searchsorted.Tensor_out", "aten::searchsorted.Scalar", "aten::searchsorted.Scalar_out"});
  // bucketize(self, boundaries, out_int32, right)
  register_lowering("aten::bucketize.Tensor", [searchsorted](LoweringContext& ctx) {
    TORCH_CHECK(ctx.b.type(ctx.tensor(1)).rank() == 1, "boundaries tensor must be 1 dimension, but got dim(",
                ctx.b.type(ctx.tensor(1)).rank(), ")");
    return std::vector<Value>{searchsorted(ctx, ctx.tensor(1), ctx.tensor(0), ctx.bool_arg(2), ctx.bool_arg(3))};
  }, {"aten::bucketize.Tensor_out"});

  // isin(elements, test_elements, assume_unique, invert): compare every
  // element with every test element (generation's stop checks use it).
  auto isin = [](LoweringContext& ctx, Value elements, Value test, bool invert) {
    Builder& b = ctx.b;
    c10::ScalarType type = result_type(ctx, {0, 1});
    elements = convert(b, elements, type);
    test = b.reshape(convert(b, test, type), {b.type(test).numel()});
    auto dims = b.dims(elements);
    int64_t m = b.dims(test)[0];
    std::vector<int64_t> full = dims;
    full.push_back(m);
    std::vector<int64_t> emap;
    for (size_t i = 0; i < dims.size(); ++i) emap.push_back(static_cast<int64_t>(i));
    Value eq = b.compare(b.broadcast_in_dim(elements, full, emap),
                         b.broadcast_in_dim(test, full, {static_cast<int64_t>(dims.size())}), hlo::Compare::kEq);
    Value found = m == 0 ? b.splat(b.constant_bool(false), dims)
                         : reduce(b, eq, {static_cast<int64_t>(dims.size())}, ReduceKind::kOr);
    return invert ? b.unary("not", found) : found;
  };
  register_lowering("aten::isin.Tensor_Tensor", [isin](LoweringContext& ctx) {
    return std::vector<Value>{isin(ctx, ctx.tensor(0), ctx.tensor(1), ctx.bool_arg(3))};
  }, {"aten::isin.Tensor_Tensor_out"});
  register_lowering("aten::isin.Tensor_Scalar", [isin](LoweringContext& ctx) {
    return std::vector<Value>{isin(ctx, ctx.tensor(0), ctx.b.reshape(ctx.tensor(1), {1}), ctx.bool_arg(3))};
  }, {"aten::isin.Tensor_Scalar_out"});
  register_lowering("aten::isin.Scalar_Tensor", [isin](LoweringContext& ctx) {
    return std::vector<Value>{isin(ctx, ctx.tensor(0), ctx.tensor(1), ctx.bool_arg(3))};
  }, {"aten::isin.Scalar_Tensor_out"});

  register_lowering("aten::flip", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    return std::vector<Value>{b.reverse(x, wrap_dims(ctx.int_list(1), std::max<int64_t>(1, b.type(x).rank())))};
  }, {"aten::flip.out"});

  register_lowering("aten::roll", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto shifts = ctx.int_list(1);
    auto dims_arg = ctx.int_list(2);
    auto in = b.dims(x);
    if (dims_arg.empty()) {
      // Roll the flattened tensor, then restore the shape.
      TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                  ", dims:0");
      int64_t n = b.type(x).numel();
      x = b.reshape(x, {n});
      dims_arg = {0};
    }
    TORCH_CHECK(shifts.size() == dims_arg.size(), "shifts and dimensions must align. shifts: ",
                shifts.size(), ", dims:", dims_arg.size());
    for (size_t k = 0; k < shifts.size(); ++k) {
      auto cur = b.dims(x);
      int64_t dim = wrap_dim(dims_arg[k], static_cast<int64_t>(cur.size()));
      int64_t n = cur[dim];
      if (n == 0) continue;
      int64_t s = ((shifts[k] % n) + n) % n;
      if (s == 0) continue;
      int64_t r = static_cast<int64_t>(cur.size());
      std::vector<int64_t> start(r, 0), limit = cur, strides(r, 1);
      start[dim] = n - s;
      Value tail = b.slice(x, start, limit, strides);
      start[dim] = 0;
      limit[dim] = n - s;
      Value head = b.slice(x, start, limit, strides);
      x = b.concatenate({tail, head}, dim);
    }
    return std::vector<Value>{b.reshape(x, in)};
  });

  // sort(self, stable, dim, descending) -> (values, indices); NaN sorts as
  // the largest value, as in torch. Always stable, which an unstable sort
  // allows. The default overload (self, dim, descending) reaches eager mode
  // through torch's composite kernel, but graphs keep it: without
  // its own lowering a graph with a torch.sort (Transformers' grouped_mm
  // experts, top-p sampling) was split around an eager sort.
  auto sort = [](LoweringContext& ctx, int64_t dim_arg) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    if (in.empty()) return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
    int64_t dim = wrap_dim(ctx.int_arg(dim_arg), static_cast<int64_t>(in.size()));
    bool descending = ctx.bool_arg(dim_arg + 1);
    bool is_float = hlo::is_float(b.element_type(x));
    Value idx = b.iota(TensorType{ElementType::kS64, in}, dim);
    return b.sort({x, idx}, dim, /*stable=*/true, nan_last_order(descending, is_float));
  };
  register_lowering("aten::sort.stable", [sort](LoweringContext& ctx) { return sort(ctx, 2); },
                    {"aten::sort.values_stable"});
  register_graph_lowering("aten::sort", [sort](LoweringContext& ctx) { return sort(ctx, 1); });

  // topk(self, k, dim, largest, sorted) -> (values, indices)
  register_lowering("aten::topk", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t k = ctx.int_arg(1);
    if (in.empty()) {
      TORCH_CHECK(k <= 1, "selected index k out of range");
      return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
    }
    int64_t dim = wrap_dim(ctx.int_arg(2), static_cast<int64_t>(in.size()));
    TORCH_CHECK(k >= 0 && k <= in[dim], "selected index k out of range");
    bool largest = ctx.bool_arg(3);
    bool is_float = hlo::is_float(b.element_type(x));
    Value idx = b.iota(TensorType{ElementType::kS64, in}, dim);
    auto sorted = b.sort({x, idx}, dim, true, nan_last_order(largest, is_float));
    int64_t rank = static_cast<int64_t>(in.size());
    std::vector<int64_t> start(rank, 0), limit = in, strides(rank, 1);
    limit[dim] = k;
    return std::vector<Value>{b.slice(sorted[0], start, limit, strides), b.slice(sorted[1], start, limit, strides)};
  }, {"aten::topk.values"});
});

}  // namespace
}  // namespace torch_pjrt::ops
