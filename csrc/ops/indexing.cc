// Indexing: index_select, gather, scatter (+add, +reduce), index_add,
// advanced indexing (index.Tensor, index_put) and embedding's backward.
// Indices are checked on the device; a bad one raises IndexError when the
// host next waits (LoweringContext::require), never reads or writes outside.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value s64(Builder& b, Value v) { return b.convert(v, ElementType::kS64); }

Value all_true(Builder& b, Value pred) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < b.type(pred).rank(); ++i) dims.push_back(i);
  return reduce(b, pred, dims, ReduceKind::kAnd);
}

// Indices in [-size, size) (negative ones allowed) or [0, size).
Value in_range(Builder& b, Value idx, int64_t size, bool allow_negative) {
  auto dims = b.dims(idx);
  Value lo = b.splat(b.constant_int(allow_negative ? -size : 0, ElementType::kS64), dims);
  Value hi = b.splat(b.constant_int(size, ElementType::kS64), dims);
  return all_true(b, b.binary("and", b.compare(idx, lo, hlo::Compare::kGe),
                              b.compare(idx, hi, hlo::Compare::kLt)));
}

Value wrap_negative(Builder& b, Value idx, int64_t size) {
  auto dims = b.dims(idx);
  Value neg = b.compare(idx, b.zeros(TensorType{ElementType::kS64, dims}), hlo::Compare::kLt);
  return b.select(neg, b.binary("add", idx, b.splat(b.constant_int(size, ElementType::kS64), dims)), idx);
}

std::vector<int64_t> with_last(std::vector<int64_t> dims, int64_t last) {
  dims.push_back(last);
  return dims;
}

// Full coordinates for gather/scatter along `dim`: iota everywhere except
// `dim`, where the index tensor gives the coordinate. Shape index + [rank].
Value coordinates(Builder& b, Value idx, int64_t dim, int64_t rank) {
  auto dims = b.dims(idx);
  std::vector<Value> parts;
  for (int64_t d = 0; d < rank; ++d) {
    Value c = d == dim ? idx : b.iota(TensorType{ElementType::kS64, dims}, d);
    parts.push_back(b.reshape(c, with_last(dims, 1)));
  }
  return b.concatenate(parts, static_cast<int64_t>(dims.size()));
}

void check_index_dtype(const LoweringContext& ctx, size_t arg, const char* op) {
  // torch lets an empty index of any integer dtype through.
  bool empty = ctx.b.type(ctx.tensor(arg)).numel() == 0;
  TORCH_CHECK_INDEX(ctx.dtype(arg) == at::kLong || ctx.dtype(arg) == at::kInt ||
                        (empty && c10::isIntegralType(ctx.dtype(arg), false)),
                    op, "(): Expected dtype int32/int64 for index");
}

Value index_select(LoweringContext& ctx, Value self, int64_t dim_arg, Value index) {
  Builder& b = ctx.b;
  auto in = b.dims(self);
  int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(in.size()));
  int64_t dim = wrap_dim(dim_arg, rank);
  if (in.empty()) self = b.reshape(self, {1}), in = {1};
  TORCH_CHECK_INDEX(b.type(index).rank() <= 1, "index_select(): Index is supposed to be a vector");
  int64_t n = b.type(index).numel();
  Value idx = b.reshape(s64(b, index), {n});
  ctx.require(in_range(b, idx, in[dim], false), "index out of range in self");
  std::vector<int64_t> offset_dims, slice = in, out = in;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    if (d != dim) offset_dims.push_back(d);
  }
  slice[dim] = 1;
  out[dim] = n;
  Builder::GatherDims g{offset_dims, {dim}, {dim}, 1};
  return b.gather(self, b.reshape(idx, {n, 1}), g, slice, out);
}

// Scatter of `updates` (index-shaped) into `self` along `dim`.
Value scatter_along(LoweringContext& ctx, Value self, int64_t dim, Value index, Value updates,
                    const std::string& combine) {
  Builder& b = ctx.b;
  auto in = b.dims(self);
  int64_t rank = static_cast<int64_t>(in.size());
  if (b.type(index).numel() == 0) return self;  // nothing to scatter
  Value idx = s64(b, index);
  ctx.require(in_range(b, idx, rank == 0 ? 1 : in[dim], false),
              "index out of bounds for the dimension being scattered into", /*index_error=*/false);
  if (rank == 0) return combine == "replace" ? b.reshape(updates, {}) : b.binary(combine, self, b.reshape(updates, {}));
  Value coords = coordinates(b, idx, dim, rank);
  std::vector<int64_t> scatter_dims;
  for (int64_t d = 0; d < rank; ++d) scatter_dims.push_back(d);
  Builder::ScatterDims s{{}, scatter_dims, scatter_dims, rank};
  return b.scatter(self, coords, updates, s, [combine](Builder& r, const std::vector<Value>& a) {
    if (combine == "replace") return std::vector<Value>{a[1]};
    return std::vector<Value>{r.binary(combine, a[0], a[1])};
  });
}

// self with src (index-shaped) reduced into it along dim: "sum", "prod",
// "mean", "amax" or "amin"; without include_self the receiving positions
// start from the reduction's identity. Integer means round down, as torch's.
Value scatter_reduce_values(LoweringContext& ctx, Value self, int64_t dim, Value index, Value src,
                            const std::string& reduce_name, bool include_self) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(self);
  auto idims = b.dims(index);
  std::string combine = reduce_name == "sum" || reduce_name == "mean" ? "add"
                        : reduce_name == "prod"                       ? "multiply"
                        : reduce_name == "amax"                       ? "maximum"
                                                                      : "minimum";
  Value base = self;
  if (!include_self) {
    ReduceKind kind = combine == "add" ? ReduceKind::kSum : combine == "multiply" ? ReduceKind::kProd
                      : combine == "maximum" ? ReduceKind::kMax : ReduceKind::kMin;
    Value identity = b.splat(reduce_init(b, t, kind), idims);
    base = scatter_along(ctx, self, dim, index, identity, "replace");
  }
  Value r = scatter_along(ctx, base, dim, index, src, combine);
  if (reduce_name == "mean") {
    Value ones = b.splat(b.constant(1, t), idims);
    Value counts = scatter_along(ctx, b.splat(b.constant(include_self ? 1 : 0, t), b.dims(self)),
                                 dim, index, ones, "add");
    Value safe = b.binary("maximum", counts, b.splat(b.constant(1, t), b.dims(self)));
    Value q = b.binary("divide", r, safe);
    if (hlo::is_signed_int(t)) {  // truncation -> floor (counts > 0)
      Value rem = b.binary("remainder", r, safe);
      Value negative = b.compare(rem, b.zeros(b.type(rem)), hlo::Compare::kLt);
      q = b.select(negative, b.binary("subtract", q, b.splat(b.constant(1, t), b.dims(q))), q);
    }
    r = q;
  }
  return r;
}

// Writes slice i of `source` along `dim` into row index[i] of `self`,
// adding to or replacing what is there (index_add, index_copy).
Value scatter_rows(LoweringContext& ctx, Value self, int64_t dim, Value index, Value source,
                   bool add, const char* op, bool allow_negative = false) {
  Builder& b = ctx.b;
  auto in = b.dims(self);
  int64_t rank = static_cast<int64_t>(in.size());
  if (rank == 0) {
    Value v = b.reshape(source, {});
    return add ? b.binary("add", self, v) : v;
  }
  int64_t n = b.type(index).numel();
  if (n == 0) return self;
  ctx.require(in_range(b, index, in[dim], allow_negative), std::string("index out of range in ") + op);
  std::vector<int64_t> window;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) window.push_back(d);
  }
  Builder::ScatterDims s{window, {dim}, {dim}, 1};
  return b.scatter(self, b.reshape(index, {n, 1}), source, s,
                   [add](Builder& r, const std::vector<Value>& a) {
                     return std::vector<Value>{add ? r.binary("add", a[0], a[1]) : a[1]};
                   });
}

// The part of `src` covered by `index`'s shape (scatter uses only that).
Value crop_to(Builder& b, Value src, const std::vector<int64_t>& dims) {
  std::vector<int64_t> zero(dims.size(), 0), one(dims.size(), 1);
  return b.slice(src, zero, dims, one);
}

// Advanced indexing: the non-None index tensors, broadcast together, pick
// elements along their dims. Returns (gathered, indices-with-coordinates).
struct Advanced {
  std::vector<int64_t> indexed;        // dims with an index tensor
  std::vector<int64_t> broadcast;      // broadcast shape of the index tensors
  Value coords;                        // broadcast + [len(indexed)]
  std::vector<int64_t> result_dims;
  std::vector<int64_t> offset_dims;    // output positions of the other dims
};

Advanced advanced_indices(LoweringContext& ctx, Value self, size_t list_arg) {
  Builder& b = ctx.b;
  const LoweringArg& list = ctx.arg(list_arg);
  auto in = b.dims(self);
  Advanced a;
  std::vector<Value> idx;
  for (size_t k = 0; k < list.tensors.size(); ++k) {
    if (!list.tensors[k].valid()) continue;
    TORCH_CHECK_INDEX(static_cast<int64_t>(k) < static_cast<int64_t>(in.size()),
                      "too many indices for tensor of dimension ", in.size(), " (got ",
                      list.tensors.size(), ")");
    TORCH_CHECK_INDEX(list.dtypes[k] == at::kLong || list.dtypes[k] == at::kInt,
                      "tensors used as indices must be long, int, byte or bool tensors");
    a.indexed.push_back(static_cast<int64_t>(k));
    idx.push_back(list.tensors[k]);
    a.broadcast = broadcast_shape(a.broadcast, b.dims(list.tensors[k]));
  }
  TORCH_CHECK_INDEX(!a.indexed.empty(), "torch_pjrt: index with no index tensors");
  std::vector<Value> parts;
  for (size_t j = 0; j < idx.size(); ++j) {
    int64_t size = in[a.indexed[j]];
    Value v = broadcast_to(b, s64(b, idx[j]), a.broadcast);
    ctx.require(in_range(b, v, size, true),
                "index out of bounds for dimension " + std::to_string(a.indexed[j]) +
                    " with size " + std::to_string(size));
    parts.push_back(b.reshape(wrap_negative(b, v, size), with_last(a.broadcast, 1)));
  }
  a.coords = b.concatenate(parts, static_cast<int64_t>(a.broadcast.size()));
  bool adjacent = true;
  for (size_t j = 1; j < a.indexed.size(); ++j) adjacent &= a.indexed[j] == a.indexed[j - 1] + 1;
  int64_t nb = static_cast<int64_t>(a.broadcast.size());
  int64_t pos = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool is_indexed = std::find(a.indexed.begin(), a.indexed.end(), d) != a.indexed.end();
    if (adjacent && d == a.indexed[0]) {
      a.result_dims.insert(a.result_dims.end(), a.broadcast.begin(), a.broadcast.end());
      pos += nb;
    }
    if (is_indexed) continue;
    a.offset_dims.push_back(adjacent ? pos : nb + static_cast<int64_t>(a.offset_dims.size()));
    a.result_dims.push_back(in[d]);
    pos++;
  }
  if (!adjacent) {
    std::vector<int64_t> rest = a.result_dims;
    a.result_dims = a.broadcast;
    a.result_dims.insert(a.result_dims.end(), rest.begin(), rest.end());
  }
  return a;
}

LoweringRegistrar registrar([] {
  register_lowering("aten::index_select", [](LoweringContext& ctx) {
    check_index_dtype(ctx, 2, "index_select");
    Value self = ctx.tensor(0);
    bool scalar = ctx.b.type(self).rank() == 0;
    Value r = index_select(ctx, self, ctx.int_arg(1), ctx.tensor(2));
    // A 0-d input gives a 0-d result, as in torch.
    if (scalar) r = ctx.b.reshape(r, {});
    return std::vector<Value>{r};
  }, {"aten::index_select.out"});

  register_lowering("aten::gather", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "gather");
    Value self = ctx.tensor(0), index = s64(b, ctx.tensor(2));
    // torch treats 0-d tensors as 1-d here, and an empty index gives an
    // empty result whatever its rank.
    std::vector<int64_t> result_dims = b.dims(index);
    if (b.type(index).numel() == 0) {
      return std::vector<Value>{b.zeros(TensorType{b.element_type(self), result_dims})};
    }
    if (b.type(self).rank() == 0) self = b.reshape(self, {1});
    if (b.type(index).rank() == 0) index = b.reshape(index, {1});
    auto in = b.dims(self);
    auto idims = b.dims(index);
    int64_t rank = static_cast<int64_t>(in.size());
    int64_t dim = wrap_dim(ctx.int_arg(1), rank);
    TORCH_CHECK(static_cast<int64_t>(idims.size()) == rank,
                "Index tensor must have the same number of dimensions as input tensor");
    for (int64_t d = 0; d < rank; ++d) {
      TORCH_CHECK(d == dim || idims[d] <= in[d], "Size does not match at dimension ", d,
                  " expected index ", c10::IntArrayRef(idims), " to be no larger than self ",
                  c10::IntArrayRef(in), " apart from dimension ", dim);
    }
    ctx.require(in_range(b, index, in[dim], false), "index out of bounds in gather",
                /*index_error=*/false);
    std::vector<int64_t> all;
    for (int64_t d = 0; d < rank; ++d) all.push_back(d);
    Builder::GatherDims g{{}, all, all, rank};
    Value coords = coordinates(b, index, dim, rank);
    Value r = b.gather(self, coords, g, std::vector<int64_t>(rank, 1), idims);
    return std::vector<Value>{b.reshape(r, result_dims)};
  }, {"aten::gather.out"});

  // scatter.src / scatter.value / scatter_add / scatter.reduce / scatter.value_reduce
  auto scatter_lowering = [](const std::string& combine, bool value_arg) {
    return [combine, value_arg](LoweringContext& ctx) {
      Builder& b = ctx.b;
      check_index_dtype(ctx, 2, "scatter");
      Value self = ctx.tensor(0);
      int64_t rank = b.type(self).rank();
      int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, rank));
      Value index = ctx.tensor(2);
      auto idims = b.dims(index);
      Value updates = value_arg ? b.splat(ctx.scalar(3, b.element_type(self)), idims)
                                : crop_to(b, b.convert(ctx.tensor(3), b.element_type(self)), idims);
      std::string how = combine;
      if (ctx.num_args() > 4 && !ctx.is_none(4)) {
        const std::string& reduce = ctx.ivalue(4).toStringRef();
        TORCH_CHECK(reduce == "add" || reduce == "multiply", "reduce argument must be either add or "
                    "multiply.");
        how = reduce == "add" ? "add" : "multiply";
      }
      return std::vector<Value>{scatter_along(ctx, self, dim, index, updates, how)};
    };
  };
  register_lowering("aten::scatter.src", scatter_lowering("replace", false),
                    {"aten::scatter_.src", "aten::scatter.src_out"});
  register_lowering("aten::scatter.value", scatter_lowering("replace", true),
                    {"aten::scatter_.value", "aten::scatter.value_out"});
  register_lowering("aten::scatter.reduce", scatter_lowering("replace", false),
                    {"aten::scatter_.reduce", "aten::scatter.reduce_out"});
  register_lowering("aten::scatter.value_reduce", scatter_lowering("replace", true),
                    {"aten::scatter_.value_reduce", "aten::scatter.value_reduce_out"});
  register_lowering("aten::scatter_add", scatter_lowering("add", false),
                    {"aten::scatter_add_", "aten::scatter_add.out"});

  register_lowering("aten::scatter_reduce.two", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "scatter_reduce");
    Value self = ctx.tensor(0);
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, b.type(self).rank()));
    Value index = ctx.tensor(2);
    Value src = crop_to(b, b.convert(ctx.tensor(3), b.element_type(self)), b.dims(index));
    const std::string& reduce_name = ctx.ivalue(4).toStringRef();
    TORCH_CHECK(reduce_name == "sum" || reduce_name == "prod" || reduce_name == "mean" ||
                    reduce_name == "amax" || reduce_name == "amin",
                "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce_name);
    return std::vector<Value>{scatter_reduce_values(ctx, self, dim, index, src, reduce_name,
                                                    ctx.bool_arg(5))};
  }, {"aten::scatter_reduce_.two", "aten::scatter_reduce.two_out"});

  // index_reduce(self, dim, index, source, reduce, include_self): source's
  // slice i along dim reduces into self's slice index[i]; a scatter_reduce
  // with the 1-D index spread over source's shape.
  register_lowering("aten::index_reduce", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "index_reduce");
    Value self = ctx.tensor(0);
    int64_t rank = b.type(self).rank();
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, rank));
    const std::string& reduce_name = ctx.ivalue(4).toStringRef();
    TORCH_CHECK(reduce_name == "prod" || reduce_name == "mean" || reduce_name == "amax" ||
                    reduce_name == "amin",
                "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ",
                reduce_name, ".");
    Value index = ctx.tensor(2);
    TORCH_CHECK(b.type(index).rank() <= 1, "index_reduce_(): Index is supposed to be a vector");
    Value source = b.convert(ctx.tensor(3), b.element_type(self));
    auto sdims = b.dims(source);
    int64_t n = b.type(index).numel();
    TORCH_CHECK(rank == 0 ? n == 1 : (static_cast<int64_t>(sdims.size()) == rank && sdims[dim] == n),
                "index_reduce_(): Index should have dimension 1 or 0 (got ", b.type(index).rank(),
                ") and match the source's size along dimension ", dim);
    if (rank == 0) {
      return std::vector<Value>{scatter_reduce_values(ctx, self, 0, b.reshape(index, {}),
                                                      b.reshape(source, {}), reduce_name,
                                                      ctx.bool_arg(5))};
    }
    Value spread = b.broadcast_in_dim(b.reshape(index, {n}), sdims, {dim});
    return std::vector<Value>{scatter_reduce_values(ctx, self, dim, spread, source, reduce_name,
                                                    ctx.bool_arg(5))};
  }, {"aten::index_reduce_", "aten::index_reduce.out"});

  register_lowering("aten::index_add", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "index_add");
    Value self = ctx.tensor(0);
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, b.type(self).rank()));
    Value index = b.reshape(s64(b, ctx.tensor(2)), {b.type(ctx.tensor(2)).numel()});
    Value source = b.convert(ctx.tensor(3), b.element_type(self));
    source = b.binary("multiply", source, b.splat(ctx.scalar(4, b.element_type(self)), b.dims(source)));
    return std::vector<Value>{scatter_rows(ctx, self, dim, index, source, /*add=*/true, "index_add")};
  }, {"aten::index_add_", "aten::index_add.out"});

  // index_copy(self, dim, index, source): rows of source replace rows index[i].
  register_lowering("aten::index_copy", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "index_copy");
    Value self = ctx.tensor(0);
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, b.type(self).rank()));
    Value index = b.reshape(s64(b, ctx.tensor(2)), {b.type(ctx.tensor(2)).numel()});
    Value source = b.convert(ctx.tensor(3), b.element_type(self));
    return std::vector<Value>{scatter_rows(ctx, self, dim, index, source, /*add=*/false, "index_copy")};
  }, {"aten::index_copy_", "aten::index_copy.out"});

  // index_fill(self, dim, index, value): rows index[i] along dim set to value.
  auto index_fill = [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    check_index_dtype(ctx, 2, "index_fill");
    Value self = ctx.tensor(0);
    auto in = b.dims(self);
    int64_t rank = static_cast<int64_t>(in.size());
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(1, rank));
    Value value = b.convert(ctx.tensor(3), b.element_type(self));
    if (rank == 0) return std::vector<Value>{b.reshape(value, {})};
    Value index = b.reshape(s64(b, ctx.tensor(2)), {b.type(ctx.tensor(2)).numel()});
    int64_t n = b.type(index).numel();
    if (n == 0) return std::vector<Value>{self};
    ctx.require(in_range(b, index, in[dim], true), "index out of range in index_fill");
    index = wrap_negative(b, index, in[dim]);
    // A mask of the chosen rows, then select.
    Builder::ScatterDims s{{}, {0}, {0}, 1};
    Value chosen = b.scatter(b.splat(b.constant_bool(false), {in[dim]}), b.reshape(index, {n, 1}),
                             b.splat(b.constant_bool(true), {n}), s,
                             [](Builder& r, const std::vector<Value>& a) {
                               return std::vector<Value>{r.binary("or", a[0], a[1])};
                             });
    Value mask = b.broadcast_in_dim(chosen, in, {dim});
    return std::vector<Value>{b.select(mask, b.splat(b.reshape(value, {}), in), self)};
  };
  register_lowering("aten::index_fill.int_Scalar", index_fill,
                    {"aten::index_fill_.int_Scalar", "aten::index_fill.int_Scalar_out"});
  register_lowering("aten::index_fill.int_Tensor", index_fill,
                    {"aten::index_fill_.int_Tensor", "aten::index_fill.int_Tensor_out"});

  // embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
  register_lowering("aten::embedding_dense_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value grad = ctx.tensor(0);
    Value idx = s64(b, ctx.tensor(1));
    int64_t n = b.type(idx).numel();
    int64_t num_weights = ctx.int_arg(2), padding = ctx.int_arg(3);
    int64_t width = b.dims(grad).back();
    ElementType t = b.element_type(grad);
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value rows = b.convert(b.reshape(grad, {n, width}), acc);
    Value flat = b.reshape(idx, {n});
    Value keep = b.compare(flat, b.splat(b.constant_int(padding, ElementType::kS64), {n}), hlo::Compare::kNe);
    rows = b.select(b.broadcast_in_dim(keep, {n, width}, {0}), rows, b.zeros(TensorType{acc, {n, width}}));
    if (ctx.bool_arg(4)) {
      Builder::ScatterDims count_dims{{}, {0}, {0}, 1};
      Value counts = b.scatter(b.zeros(TensorType{acc, {num_weights}}), b.reshape(flat, {n, 1}),
                               b.splat(b.constant(1, acc), {n}), count_dims,
                               [](Builder& r, const std::vector<Value>& a) {
                                 return std::vector<Value>{r.binary("add", a[0], a[1])};
                               });
      Builder::GatherDims g{{}, {0}, {0}, 1};
      Value per_row = b.gather(counts, b.reshape(flat, {n, 1}), g, {1}, {n});
      rows = b.binary("divide", rows, b.broadcast_in_dim(per_row, {n, width}, {0}));
    }
    Builder::ScatterDims s{{1}, {0}, {0}, 1};
    Value out = b.scatter(b.zeros(TensorType{acc, {num_weights, width}}), b.reshape(flat, {n, 1}),
                          rows, s, [](Builder& r, const std::vector<Value>& a) {
                            return std::vector<Value>{r.binary("add", a[0], a[1])};
                          });
    return std::vector<Value>{b.convert(out, t)};
  }, {"aten::embedding_dense_backward.out"});

  // embedding_renorm_(self, indices, max_norm, norm_type): rows that are
  // looked up and whose norm exceeds max_norm are scaled down to it.
  register_lowering("aten::embedding_renorm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value weight = ctx.tensor(0);
    auto dims = b.dims(weight);
    TORCH_CHECK(dims.size() == 2, "embedding_renorm_: weight must be 2-D");
    ElementType t = b.element_type(weight);
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value idx = s64(b, ctx.tensor(1));
    int64_t n = b.type(idx).numel();
    Value flat = b.reshape(idx, {n, 1});
    ctx.require(in_range(b, b.reshape(idx, {n}), dims[0], false), "index out of range in self");
    Builder::ScatterDims s{{}, {0}, {0}, 1};
    Value used = b.scatter(b.splat(b.constant_bool(false), {dims[0]}), flat, b.splat(b.constant_bool(true), {n}), s,
                           [](Builder& r, const std::vector<Value>& a) {
                             return std::vector<Value>{r.binary("or", a[0], a[1])};
                           });
    double p = ctx.double_arg(3);
    Value w = b.convert(weight, acc);
    Value absw = b.unary("abs", w);
    Value norm;
    if (p == 2) {
      norm = b.unary("sqrt", reduce(b, b.binary("multiply", w, w), {1}, ReduceKind::kSum));
    } else if (p == 1) {
      norm = reduce(b, absw, {1}, ReduceKind::kSum);
    } else {
      Value pw = b.binary("power", absw, b.splat(b.constant(p, acc), dims));
      norm = b.binary("power", reduce(b, pw, {1}, ReduceKind::kSum),
                      b.splat(b.constant(1.0 / p, acc), {dims[0]}));
    }
    Value max_norm = b.splat(b.constant(ctx.double_arg(2), acc), {dims[0]});
    Value scale = b.binary("divide", max_norm, b.binary("add", norm, b.splat(b.constant(1e-7, acc), {dims[0]})));
    Value shrink = b.binary("and", used, b.compare(norm, max_norm, hlo::Compare::kGt));
    Value factor = b.select(shrink, scale, b.splat(b.constant(1.0, acc), {dims[0]}));
    Value out = b.binary("multiply", w, b.broadcast_in_dim(factor, dims, {0}));
    return std::vector<Value>{b.convert(out, t)};
  }, {"aten::embedding_renorm_", "aten::embedding_renorm.out"}, /*static_scalars=*/{2, 3});

  register_lowering("aten::index.Tensor", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    Advanced a = advanced_indices(ctx, self, 1);
    auto in = b.dims(self);
    std::vector<int64_t> slice = in;
    for (int64_t d : a.indexed) {
      // Nothing to gather from: the result is empty, or an index is out of
      // range, which advanced_indices' check reports.
      if (in[d] == 0) return std::vector<Value>{b.zeros(TensorType{b.element_type(self), a.result_dims})};
      slice[d] = 1;
    }
    Builder::GatherDims g{a.offset_dims, a.indexed, a.indexed, static_cast<int64_t>(a.broadcast.size())};
    return std::vector<Value>{b.gather(self, a.coords, g, slice, a.result_dims)};
  }, {"aten::index.Tensor_out"});

  // put(self, index, source, accumulate): source's elements written (or
  // added) at the flat positions `index` names in self.
  register_lowering("aten::put", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    TORCH_CHECK(ctx.dtype(1) == at::kLong, "put_(): Expected a long tensor for index, but got ",
                ctx.dtype(1));
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(2), "put_(): self and source expected to have the same "
                "dtype, but got self.dtype = ", ctx.dtype(0), " and source.dtype = ", ctx.dtype(2));
    int64_t k = b.type(ctx.tensor(1)).numel();
    TORCH_CHECK_INDEX(b.type(ctx.tensor(2)).numel() == k, "put_(): Expected source and index to "
                      "have the same number of elements, but got source.numel() = ",
                      b.type(ctx.tensor(2)).numel(), ", index.numel() = ", k);
    auto dims = b.dims(self);
    int64_t n = b.type(self).numel();
    if (k == 0) return std::vector<Value>{self};
    TORCH_CHECK_INDEX(n > 0, "put_(): Tried to put elements into an empty tensor");
    Value idx = b.reshape(ctx.tensor(1), {k});
    ctx.require(in_range(b, idx, n, /*allow_negative=*/true),
                "put_(): index out of range for a tensor of " + std::to_string(n) + " elements");
    idx = b.reshape(wrap_negative(b, idx, n), {k, 1});
    Value flat = b.reshape(self, {n});
    Value src = b.reshape(ctx.tensor(2), {k});
    bool accumulate = ctx.bool_arg(3);
    Builder::ScatterDims s{{}, {0}, {0}, 1};
    Value out = b.scatter(flat, idx, src, s, [accumulate](Builder& r, const std::vector<Value>& v) {
      if (!accumulate) return std::vector<Value>{v[1]};
      if (r.element_type(v[0]) == ElementType::kPred) return std::vector<Value>{r.binary("or", v[0], v[1])};
      return std::vector<Value>{r.binary("add", v[0], v[1])};
    });
    return std::vector<Value>{b.reshape(out, dims)};
  }, {"aten::put_", "aten::put.out"});

  // index_put(self, indices, values, accumulate); _index_put_impl_ adds `unsafe`.
  register_lowering("aten::index_put", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    ElementType t = b.element_type(self);
    Advanced a = advanced_indices(ctx, self, 1);
    Value values = b.convert(ctx.tensor(2), t);
    values = broadcast_to(b, values, a.result_dims);
    bool accumulate = ctx.bool_arg(3);
    for (int64_t d : a.indexed) {
      if (b.dims(self)[d] == 0) return std::vector<Value>{self};  // nowhere to write
    }
    Builder::ScatterDims s{a.offset_dims, a.indexed, a.indexed, static_cast<int64_t>(a.broadcast.size())};
    return std::vector<Value>{b.scatter(self, a.coords, values, s,
                                        [accumulate](Builder& r, const std::vector<Value>& v) {
                                          return std::vector<Value>{accumulate ? r.binary("add", v[0], v[1]) : v[1]};
                                        })};
  }, {"aten::index_put_", "aten::_index_put_impl_", "aten::index_put.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
