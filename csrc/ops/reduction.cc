// Reductions: sum, mean, prod, amax/amin, max/min (with indices), argmax,
// argmin, var/std, vector norms, any/all, logsumexp.
#include <c10/util/Exception.h>

#include <limits>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

// dim=None or [] means every dimension, as in torch.
std::vector<int64_t> reduced_dims(const LoweringContext& ctx, size_t arg, int64_t rank) {
  std::optional<std::vector<int64_t>> dims;
  if (!ctx.is_none(arg)) dims = ctx.int_list(arg);
  if (!dims || dims->empty()) {
    std::vector<int64_t> all;
    for (int64_t i = 0; i < rank; ++i) all.push_back(i);
    return all;
  }
  if (rank == 0) {
    for (int64_t d : *dims) wrap_dim(d, 1);  // torch accepts dim 0/-1 on scalars
    return {};
  }
  return wrap_dims(*dims, rank);
}

Value finish(Builder& b, Value reduced, const std::vector<int64_t>& in_dims,
             const std::vector<int64_t>& dims, bool keepdim) {
  return keepdim ? keep_dims(b, reduced, in_dims, dims) : reduced;
}

// Sum-like accumulation type: integers and bool sum as int64, as in torch.
c10::ScalarType sum_type(c10::ScalarType in, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(in, /*includeBool=*/true) ? at::kLong : in;
}

// Accumulates low-precision floats in f32 and converts back.
c10::ScalarType accumulate_type(c10::ScalarType t) {
  return (t == at::kHalf || t == at::kBFloat16) ? at::kFloat : t;
}

void register_sum_mean_prod() {
  auto sum_dim = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    auto dims = reduced_dims(ctx, 1, b.type(x).rank());
    c10::ScalarType out = sum_type(ctx.dtype(0), ctx.optional_dtype(3));
    Value r = reduce(b, convert(b, x, accumulate_type(out)), dims, ReduceKind::kSum);
    return std::vector<Value>{finish(b, convert(b, r, out), in, dims, ctx.bool_arg(2))};
  };
  register_lowering("aten::sum.dim_IntList", sum_dim, {"aten::sum.IntList_out"});
  // nansum(self, dim, keepdim, dtype): sum with NaN counted as zero.
  register_lowering("aten::nansum", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    auto dims = reduced_dims(ctx, 1, b.type(x).rank());
    c10::ScalarType out = sum_type(ctx.dtype(0), ctx.optional_dtype(3));
    Value v = convert(b, x, accumulate_type(out));
    if (hlo::is_float(b.element_type(v))) {
      v = b.select(b.compare(v, v, hlo::Compare::kNe), b.zeros(b.type(v)), v);
    }
    Value r = reduce(b, v, dims, ReduceKind::kSum);
    return std::vector<Value>{finish(b, convert(b, r, out), in, dims, ctx.bool_arg(2))};
  }, {"aten::nansum.out"});
  // count_nonzero(self, dims) -> int64
  register_lowering("aten::count_nonzero.dim_IntList", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto dims = reduced_dims(ctx, 1, b.type(x).rank());
    Value nz = b.convert(b.compare(x, b.zeros(b.type(x)), hlo::Compare::kNe), ElementType::kS64);
    return std::vector<Value>{reduce(b, nz, dims, ReduceKind::kSum)};
  }, {"aten::count_nonzero.dim_IntList_out"});
  register_lowering("aten::sum", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < b.type(x).rank(); ++i) dims.push_back(i);
    c10::ScalarType out = sum_type(ctx.dtype(0), ctx.optional_dtype(1));
    Value r = reduce(b, convert(b, x, accumulate_type(out)), dims, ReduceKind::kSum);
    return std::vector<Value>{convert(b, r, out)};
  }, {"aten::sum.out"});

  register_lowering("aten::mean.dim", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    c10::ScalarType out = ctx.optional_dtype(3).value_or(ctx.dtype(0));
    TORCH_CHECK(c10::isFloatingType(out) || c10::isComplexType(out),
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                "point or complex dtype. Got: ", out);
    auto in = b.dims(x);
    auto dims = reduced_dims(ctx, 1, b.type(x).rank());
    int64_t count = 1;
    for (int64_t d : dims) count *= in[d];
    c10::ScalarType acc = accumulate_type(out);
    Value r = reduce(b, convert(b, x, acc), dims, ReduceKind::kSum);
    r = b.binary("divide", r, b.splat(b.constant(static_cast<double>(count), et(acc)), b.dims(r)));
    return std::vector<Value>{finish(b, convert(b, r, out), in, dims, ctx.bool_arg(2))};
  }, {"aten::mean.out"});

  auto prod = [](LoweringContext& ctx, std::optional<int64_t> dim, bool keepdim,
                 std::optional<c10::ScalarType> dtype) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    std::vector<int64_t> dims;
    if (dim) {
      if (!in.empty()) dims = {wrap_dim(*dim, static_cast<int64_t>(in.size()))};
    } else {
      for (size_t i = 0; i < in.size(); ++i) dims.push_back(static_cast<int64_t>(i));
    }
    c10::ScalarType out = sum_type(ctx.dtype(0), dtype);
    Value r = reduce(b, convert(b, x, accumulate_type(out)), dims, ReduceKind::kProd);
    return std::vector<Value>{finish(b, convert(b, r, out), in, dims, keepdim)};
  };
  register_lowering("aten::prod", [prod](LoweringContext& ctx) {
    return prod(ctx, std::nullopt, false, ctx.optional_dtype(1));
  }, {"aten::prod.out"});
  register_lowering("aten::prod.dim_int", [prod](LoweringContext& ctx) {
    return prod(ctx, ctx.int_arg(1), ctx.bool_arg(2), ctx.optional_dtype(3));
  }, {"aten::prod.int_out"});
}

void register_extrema() {
  auto amax_amin = [](ReduceKind kind) {
    return [kind](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto in = b.dims(x);
      auto dims = reduced_dims(ctx, 1, b.type(x).rank());
      for (int64_t d : dims) {
        TORCH_CHECK(in[d] != 0, kind == ReduceKind::kMax ? "amax" : "amin",
                    "(): Expected reduction dim ", d, " to have non-zero size.");
      }
      return std::vector<Value>{finish(b, reduce(b, x, dims, kind), in, dims, ctx.bool_arg(2))};
    };
  };
  register_lowering("aten::amax", amax_amin(ReduceKind::kMax), {"aten::amax.out"});
  // aminmax(self, *, dim=None, keepdim=False) -> (min, max)
  register_lowering("aten::aminmax", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t rank = b.type(x).rank();
    std::vector<int64_t> dims;
    if (ctx.is_none(1)) {
      TORCH_CHECK(b.type(x).numel() > 0, "aminmax(): cannot compute aminmax over an empty dimension "
                  "as the operation has no identity.");
      for (int64_t i = 0; i < rank; ++i) dims.push_back(i);
    } else if (rank > 0) {
      dims = {wrap_dim(ctx.int_arg(1), rank)};
      TORCH_CHECK(in[dims[0]] != 0, "aminmax(): Expected reduction dim ", dims[0],
                  " to have non-zero size.");
    } else {
      wrap_dim(ctx.int_arg(1), 1);
    }
    bool keepdim = ctx.bool_arg(2);
    return std::vector<Value>{finish(b, reduce(b, x, dims, ReduceKind::kMin), in, dims, keepdim),
                              finish(b, reduce(b, x, dims, ReduceKind::kMax), in, dims, keepdim)};
  }, {"aten::aminmax.out"});
  register_lowering("aten::amin", amax_amin(ReduceKind::kMin), {"aten::amin.out"});

  auto full = [](ReduceKind kind) {
    return [kind](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      TORCH_CHECK(b.type(x).numel() > 0, kind == ReduceKind::kMax ? "max" : "min",
                  "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                  "reduction dim with the 'dim' argument.");
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < b.type(x).rank(); ++i) dims.push_back(i);
      return std::vector<Value>{reduce(b, x, dims, kind)};
    };
  };
  register_lowering("aten::max", full(ReduceKind::kMax), {"aten::max.unary_out"});
  register_lowering("aten::min", full(ReduceKind::kMin), {"aten::min.unary_out"});
}

// Value and first index of the max (or min) along `dim`, NaN counting as
// the largest, as torch does.
std::pair<Value, Value> arg_extreme(Builder& b, Value x, int64_t dim, bool max) {
  auto in = b.dims(x);
  ElementType t = b.element_type(x);
  Value idx = b.iota(TensorType{ElementType::kS64, in}, dim);
  auto out = b.reduce(
      {x, idx}, {reduce_init(b, t, max ? ReduceKind::kMax : ReduceKind::kMin),
                 b.constant_int(0, ElementType::kS64)},
      {dim}, [max, t](Builder& r, const std::vector<Value>& a) {
        // a = (best, best_index, candidate, candidate_index)
        Value better = r.compare(a[2], a[0], max ? hlo::Compare::kGt : hlo::Compare::kLt);
        Value same = r.compare(a[2], a[0], hlo::Compare::kEq);
        if (hlo::is_float(t)) {
          Value cand_nan = r.compare(a[2], a[2], hlo::Compare::kNe);
          Value best_nan = r.compare(a[0], a[0], hlo::Compare::kNe);
          better = r.binary("or", r.binary("and", cand_nan, r.unary("not", best_nan)),
                            r.binary("and", better, r.unary("not", best_nan)));
          same = r.binary("or", same, r.binary("and", cand_nan, best_nan));
        }
        Value earlier = r.compare(a[3], a[1], hlo::Compare::kLt);
        Value take = r.binary("or", better, r.binary("and", same, earlier));
        return std::vector<Value>{r.select(take, a[2], a[0]), r.select(take, a[3], a[1])};
      });
  return {out[0], out[1]};
}

void register_indexed_extrema() {
  for (bool is_max : {true, false}) {
    std::string name = is_max ? "max" : "min";
    register_lowering("aten::" + name + ".dim", [is_max, name](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto in = b.dims(x);
      bool keepdim = ctx.bool_arg(2);
      if (in.empty()) {
        wrap_dim(ctx.int_arg(1), 1);
        return std::vector<Value>{x, b.constant_int(0, ElementType::kS64)};
      }
      int64_t dim = wrap_dim(ctx.int_arg(1), static_cast<int64_t>(in.size()));
      TORCH_CHECK(in[dim] != 0, name, "(): Expected reduction dim ", dim,
                  " to have non-zero size.");
      auto [values, indices] = arg_extreme(b, x, dim, is_max);
      return std::vector<Value>{finish(b, values, in, {dim}, keepdim),
                                finish(b, indices, in, {dim}, keepdim)};
    }, {"aten::" + name + ".dim_" + name});
    std::string arg = is_max ? "argmax" : "argmin";
    register_lowering("aten::" + arg, [is_max, arg](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto in = b.dims(x);
      bool keepdim = ctx.bool_arg(2);
      std::optional<int64_t> dim = ctx.optional_int(1);
      if (!dim) {
        TORCH_CHECK(b.type(x).numel() > 0, arg, "(): Expected reduction dim to be specified for "
                    "input.numel() == 0.");
        Value flat = b.reshape(x, {b.type(x).numel()});
        Value index = arg_extreme(b, flat, 0, is_max).second;
        if (keepdim) index = b.reshape(index, std::vector<int64_t>(in.size(), 1));
        return std::vector<Value>{index};
      }
      if (in.empty()) {
        wrap_dim(*dim, 1);
        return std::vector<Value>{b.constant_int(0, ElementType::kS64)};
      }
      int64_t d = wrap_dim(*dim, static_cast<int64_t>(in.size()));
      TORCH_CHECK(in[d] != 0, arg, "(): Expected reduction dim ", d, " to have non-zero size.");
      return std::vector<Value>{finish(b, arg_extreme(b, x, d, is_max).second, in, {d}, keepdim)};
    }, {"aten::" + arg + ".out"});
  }
}

void register_var_std() {
  for (bool is_std : {false, true}) {
    std::string name = is_std ? "std" : "var";
    register_lowering("aten::" + name + ".correction", [is_std](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      c10::ScalarType type = float_type(ctx.dtype(0));
      c10::ScalarType acc = accumulate_type(type);
      x = convert(b, x, acc);
      auto in = b.dims(x);
      auto dims = reduced_dims(ctx, 1, b.type(x).rank());
      double correction = 1;
      if (!ctx.is_none(2)) correction = ctx.ivalue(2).toScalar().toDouble();
      int64_t n = 1;
      for (int64_t d : dims) n *= in[d];
      Value sum = reduce(b, x, dims, ReduceKind::kSum);
      Value mean = b.binary("divide", sum, b.splat(b.constant(static_cast<double>(n), et(acc)),
                                                   b.dims(sum)));
      Value centered = b.binary("subtract", x, expand_reduced(b, mean, in, dims));
      Value sq = reduce(b, b.binary("multiply", centered, centered), dims, ReduceKind::kSum);
      double denom = std::max(0.0, static_cast<double>(n) - correction);
      Value v = b.binary("divide", sq, b.splat(b.constant(denom, et(acc)), b.dims(sq)));
      if (is_std) v = b.unary("sqrt", v);
      return std::vector<Value>{finish(b, convert(b, v, type), in, dims, ctx.bool_arg(3))};
    }, {"aten::" + name + ".correction_out"}, /*static_scalars=*/{2});
  }
  // var_mean / std_mean(self, dim, correction, keepdim) -> (var or std, mean)
  for (bool is_std : {false, true}) {
    std::string name = is_std ? "std_mean" : "var_mean";
    register_lowering("aten::" + name + ".correction", [is_std](LoweringContext& ctx) {
      Builder& b = ctx.b;
      c10::ScalarType type = float_type(ctx.dtype(0));
      c10::ScalarType acc = accumulate_type(type);
      Value x = convert(b, ctx.tensor(0), acc);
      auto in = b.dims(x);
      auto dims = reduced_dims(ctx, 1, b.type(x).rank());
      double correction = ctx.is_none(2) ? 1.0 : ctx.ivalue(2).toScalar().toDouble();
      int64_t n = 1;
      for (int64_t d : dims) n *= in[d];
      Value sum = reduce(b, x, dims, ReduceKind::kSum);
      Value mean = b.binary("divide", sum, b.splat(b.constant(static_cast<double>(n), et(acc)), b.dims(sum)));
      Value centered = b.binary("subtract", x, expand_reduced(b, mean, in, dims));
      Value sq = reduce(b, b.binary("multiply", centered, centered), dims, ReduceKind::kSum);
      double denom = std::max(0.0, static_cast<double>(n) - correction);
      Value var = b.binary("divide", sq, b.splat(b.constant(denom, et(acc)), b.dims(sq)));
      if (is_std) var = b.unary("sqrt", var);
      bool keepdim = ctx.bool_arg(3);
      return std::vector<Value>{finish(b, convert(b, var, type), in, dims, keepdim),
                                finish(b, convert(b, mean, type), in, dims, keepdim)};
    }, {"aten::" + name + ".correction_out"}, /*static_scalars=*/{2});
  }
}

void register_logical_and_norms() {
  for (bool is_all : {true, false}) {
    std::string name = is_all ? "all" : "any";
    ReduceKind kind = is_all ? ReduceKind::kAnd : ReduceKind::kOr;
    auto lower = [kind](LoweringContext& ctx, std::vector<int64_t> dims, bool keepdim) {
      Builder& b = ctx.b;
      Value x = ctx.tensor(0);
      auto in = b.dims(x);
      Value truth = b.compare(x, b.zeros(TensorType{b.element_type(x), in}), hlo::Compare::kNe);
      Value r = reduce(b, truth, dims, kind);
      // uint8 inputs give uint8 results, as in torch.
      if (ctx.dtype(0) == at::kByte) r = b.convert(r, ElementType::kU8);
      return std::vector<Value>{finish(b, r, in, dims, keepdim)};
    };
    register_lowering("aten::" + name, [lower](LoweringContext& ctx) {
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < ctx.b.type(ctx.tensor(0)).rank(); ++i) dims.push_back(i);
      return lower(ctx, dims, false);
    }, {"aten::" + name + ".all_out"});
    register_lowering("aten::" + name + ".dim", [lower](LoweringContext& ctx) {
      int64_t rank = ctx.b.type(ctx.tensor(0)).rank();
      std::vector<int64_t> dims;
      if (rank > 0) dims = {wrap_dim(ctx.int_arg(1), rank)};
      return lower(ctx, dims, ctx.bool_arg(2));
    }, {"aten::" + name + ".out"});
    register_lowering("aten::" + name + ".dims", [lower](LoweringContext& ctx) {
      return lower(ctx, reduced_dims(ctx, 1, ctx.b.type(ctx.tensor(0)).rank()), ctx.bool_arg(2));
    }, {"aten::" + name + ".dims_out"});
  }

  register_lowering("aten::linalg_vector_norm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.optional_dtype(4).value_or(float_type(ctx.dtype(0)));
    TORCH_CHECK(c10::isFloatingType(type), "linalg.vector_norm: Expected a floating point or "
                "complex tensor as input. Got ", ctx.dtype(0));
    c10::ScalarType acc = accumulate_type(type);
    Value x = b.unary("abs", convert(b, ctx.tensor(0), acc));
    auto in = b.dims(x);
    auto dims = reduced_dims(ctx, 2, b.type(x).rank());
    double ord = ctx.ivalue(1).toScalar().toDouble();
    Value r;
    if (std::isinf(ord)) {
      r = reduce(b, x, dims, ord > 0 ? ReduceKind::kMax : ReduceKind::kMin);
    } else if (ord == 0) {
      Value nz = b.convert(b.compare(x, b.zeros(TensorType{et(acc), in}), hlo::Compare::kNe), et(acc));
      r = reduce(b, nz, dims, ReduceKind::kSum);
    } else if (ord == 1) {
      r = reduce(b, x, dims, ReduceKind::kSum);
    } else if (ord == 2) {
      r = b.unary("sqrt", reduce(b, b.binary("multiply", x, x), dims, ReduceKind::kSum));
    } else {
      Value p = b.splat(b.constant(ord, et(acc)), in);
      Value s = reduce(b, b.binary("power", x, p), dims, ReduceKind::kSum);
      r = b.binary("power", s, b.splat(b.constant(1.0 / ord, et(acc)), b.dims(s)));
    }
    return std::vector<Value>{finish(b, convert(b, r, type), in, dims, ctx.bool_arg(3))};
  }, {"aten::linalg_vector_norm.out"}, /*static_scalars=*/{1});

  register_lowering("aten::logsumexp", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = float_type(ctx.dtype(0));
    c10::ScalarType acc = accumulate_type(type);
    Value x = convert(b, ctx.tensor(0), acc);
    auto in = b.dims(x);
    auto dims = reduced_dims(ctx, 1, b.type(x).rank());
    if (dims.empty()) return std::vector<Value>{convert(b, x, type)};
    Value m = reduce(b, x, dims, ReduceKind::kMax);
    // An all -inf slice keeps -inf instead of NaN.
    Value finite = b.compare(b.unary("abs", m), b.splat(b.constant(INFINITY, et(acc)), b.dims(m)),
                             hlo::Compare::kNe);
    Value shift = b.select(finite, m, b.zeros(TensorType{et(acc), b.dims(m)}));
    Value shifted = b.binary("subtract", x, expand_reduced(b, shift, in, dims));
    Value s = reduce(b, b.unary("exponential", shifted), dims, ReduceKind::kSum);
    Value r = b.binary("add", b.unary("log", s), shift);
    return std::vector<Value>{finish(b, convert(b, r, type), in, dims, ctx.bool_arg(2))};
  }, {"aten::logsumexp.out"});
}

// hash_tensor(self, dim=[], keepdim=False, mode=0): the xor of every
// element's bits, floats widened to float64 and integers to 64 bits first.
void register_hash() {
  register_lowering("aten::hash_tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t rank = static_cast<int64_t>(in.size());
    TORCH_CHECK(ctx.int_arg(3) == 0, "Unknown hash_tensor mode: ", ctx.int_arg(3));
    std::vector<int64_t> dims = wrap_dims(ctx.int_list(1), std::max<int64_t>(rank, 1));
    if (rank == 0) dims.clear();
    if (ctx.int_list(1).empty()) {
      TORCH_CHECK(b.type(x).numel() > 0, "hash_tensor: Expected reduction dim to be specified for "
                  "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
      for (int64_t i = 0; i < rank; ++i) dims.push_back(i);
    }
    for (int64_t d : dims) {
      TORCH_CHECK_INDEX(in[d] > 0, "hash_tensor: Expected reduction dim ", d,
                        " to have non-zero size.");
    }
    ElementType t = b.element_type(x);
    Value bits = hlo::is_float(t) ? b.bitcast_convert(b.convert(x, ElementType::kF64), ElementType::kU64)
                                  : b.convert(b.convert(x, ElementType::kS64), ElementType::kU64);
    Value zero = b.constant_int(0, ElementType::kU64);
    Value r = b.reduce({bits}, {zero}, dims, [](Builder& body, const std::vector<Value>& a) {
      return std::vector<Value>{body.binary("xor", a[0], a[1])};
    })[0];
    if (ctx.bool_arg(2)) r = keep_dims(b, r, in, dims);
    return std::vector<Value>{r};
  }, {"aten::hash_tensor.out"});
}

LoweringRegistrar registrar([] {
  register_sum_mean_prod();
  register_extrema();
  register_indexed_extrema();
  register_var_std();
  register_logical_and_norms();
  register_hash();
});

}  // namespace
}  // namespace torch_pjrt::ops
