// embedding_bag: _embedding_bag and _embedding_bag_forward_only (sum, mean,
// max over bags of looked-up rows, per_sample_weights, include_last_offset,
// padding_idx) and their backward ops (_embedding_bag_backward,
// _embedding_bag_dense_backward, _embedding_bag_per_sample_weights_backward).
// The bag of each index position (offset2bag) is computed on the device from
// the offsets (ops/segments.h); each bag combines its rows there too. The
// auxiliary outputs (offset2bag, bag_size, max_indices) follow CPU's, shapes
// and placeholders included: CPU's fast path (float types without
// padding_idx) skips offset2bag in sum mode and, with include_last_offset,
// ends the last bag at the last offset (in compiled graphs they follow torch's
// meta function instead, which the graph is checked against; the backward
// ops read either layout). The offsets and indices are checked
// on the device, in CPU's order and with its exception types.
#include <c10/util/Exception.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/segments.h"

namespace torch_pjrt::ops {
namespace {

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;

Value s64(Builder& b, Value v) { return b.convert(v, ElementType::kS64); }

Value slice1(Builder& b, Value v, int64_t start, int64_t limit) {
  return b.slice(v, {start}, {limit}, {1});
}

Value as_row(Builder& b, Value v) {  // [n] -> [1, n]
  return b.reshape(v, {1, b.dims(v)[0]});
}

void check_index_types(c10::ScalarType indices, c10::ScalarType offsets) {
  for (auto [name, type] : {std::pair{"indices", indices}, std::pair{"offsets", offsets}}) {
    TORCH_CHECK(type == at::kLong || type == at::kInt, "Expected tensor for argument #1 '", name,
                "' to have one of the following scalar types: Long, Int; but got ", type,
                " instead (while checking arguments for embedding_bag)");
  }
}

void check_float_type(c10::ScalarType type, const char* name) {
  TORCH_CHECK(type == at::kHalf || type == at::kBFloat16 || type == at::kFloat || type == at::kDouble,
              "Expected tensor for argument #1 '", name,
              "' to have one of the following scalar types: Half, BFloat16, Float, Double; but got ",
              type, " instead (while checking arguments for embedding_bag)");
}

// The bag of each index position as CPU's offset2bag: the number of the
// given offsets at or before the position, minus one.
Value bags_from_offsets(Builder& b, Value offsets, int64_t n) {
  return b.reshape(segment_of(b, as_row(b, s64(b, offsets)), n), {n});
}

// The bag of each position for the backward ops: offset2bag when the forward
// produced it, else recomputed from all the offsets as CPU does.
Value bags_for_backward(LoweringContext& ctx, Value indices, int offsets_arg, int offset2bag_arg) {
  Builder& b = ctx.b;
  int64_t n = b.type(indices).numel();
  Value o2b = ctx.tensor(offset2bag_arg);
  if (n != 0 && b.type(o2b).numel() == 0 && offsets_arg >= 0) {
    return bags_from_offsets(b, ctx.tensor(offsets_arg), n);
  }
  TORCH_CHECK(b.type(o2b).numel() == n, "embedding_bag: offset2bag has ", b.type(o2b).numel(),
              " elements but there are ", n, " indices");
  return b.reshape(s64(b, o2b), {n});
}

std::vector<Value> embedding_bag(LoweringContext& ctx, bool forward_only) {
  Builder& b = ctx.b;
  Value weight = ctx.tensor(0);
  c10::ScalarType wtype = ctx.dtype(0);
  int64_t mode = ctx.int_arg(4);
  bool include_last = ctx.bool_arg(7);
  int64_t padding_idx = ctx.int_arg(8);
  TORCH_CHECK(b.type(ctx.tensor(1)).rank() == 1,
              "embedding_bag: input has to be a 1D Tensor (2D input is flattened with offsets by "
              "torch.nn.functional.embedding_bag), but got Tensor of dimension ",
              b.type(ctx.tensor(1)).rank());
  TORCH_CHECK(b.type(ctx.tensor(2)).rank() == 1,
              "offsets has to be a 1D Tensor, but got Tensor of dimension ", b.type(ctx.tensor(2)).rank());
  c10::ScalarType itype = c10::promoteTypes(ctx.dtype(1), ctx.dtype(2));
  check_index_types(itype, itype);
  check_float_type(wtype, "weight");
  TORCH_CHECK(b.type(weight).rank() == 2, "embedding_bag: weight has to be a 2D Tensor, but got ",
              "Tensor of dimension ", b.type(weight).rank());
  TORCH_CHECK(mode == kSum || mode == kMean || mode == kMax, "embedding_bag: unknown mode ", mode);
  bool weighted = !ctx.is_none(6);
  int64_t n = b.type(ctx.tensor(1)).numel();
  if (weighted) {
    TORCH_CHECK(mode == kSum, "embedding_bag: per_sample_weights only supported with mode='sum'");
    TORCH_CHECK(ctx.dtype(6) == wtype, "expected scalar type ", wtype, " but found ", ctx.dtype(6));
    TORCH_CHECK(b.type(ctx.tensor(6)).rank() == 1 && b.type(ctx.tensor(6)).numel() == n,
                "embedding_bag: per_sample_weights must be 1-D with one weight per index");
  }
  int64_t num_offsets = b.type(ctx.tensor(2)).numel();
  if (include_last) {
    TORCH_CHECK(num_offsets >= 1, "include_last_offset: number of offset should be at least 1");
  }
  int64_t bags = num_offsets - (include_last ? 1 : 0);
  int64_t rows = b.dims(weight)[0], width = b.dims(weight)[1];
  bool fast = (wtype == at::kFloat || wtype == at::kHalf || wtype == at::kBFloat16) && padding_idx < 0;
  bool with_offset2bag = mode != kSum || !fast;
  ElementType it = et(itype);

  Value idx = s64(b, ctx.tensor(1));
  Value off = s64(b, ctx.tensor(2));
  std::vector<int64_t> nd = {n};

  // --- data checks, in CPU's order -----------------------------------------
  if (num_offsets > 0) {
    ctx.require(b.compare(b.reshape(slice1(b, off, 0, 1), {}), b.constant_int(0, ElementType::kS64),
                          hlo::Compare::kEq),
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                "from position 0",
                /*index_error=*/false);
    ctx.require(b.compare(b.reshape(slice1(b, off, num_offsets - 1, num_offsets), {}),
                          b.constant_int(n, ElementType::kS64), hlo::Compare::kLe),
                "offsets[-1] can not be greater than input's length " + std::to_string(n),
                /*index_error=*/false);
  }
  Value starts = slice1(b, off, 0, bags);
  if (with_offset2bag && bags > 0) {
    // CPU's index_add of ones at the offsets.
    ctx.require(all_of(b, index_in_range(b, starts, 0, n + 1)), "index out of range in self");
  }
  Value bag = bags_from_offsets(b, starts, n);
  Value pos = b.iota(TensorType{ElementType::kS64, nd}, 0);
  Value covered = index_in_range(b, bag, 0, bags);
  if (fast && include_last && bags > 0) {
    // The fast path ends the last bag at the last offset.
    Value end = b.reshape(slice1(b, off, bags, bags + 1), {});
    covered = b.binary("and", covered, b.compare(pos, b.splat(end, nd), hlo::Compare::kLt));
  }
  Value valid_idx = index_in_range(b, idx, 0, rows);
  ctx.require(all_of(b, b.binary("or", b.unary("not", covered), valid_idx)),
              "embedding_bag: Expected idx >= 0 && idx < num_embeddings", /*index_error=*/false);
  if (fast && bags > 0) {
    Value last = include_last ? slice1(b, off, bags, bags + 1) : s64_splat(b, n, {1});
    Value ends = b.concatenate({slice1(b, off, 1, bags), last}, 0);
    ctx.require(all_of(b, b.compare(starts, ends, hlo::Compare::kLe)),
                "embedding_bag: offsets must be non-decreasing", /*index_error=*/false);
  }

  // --- bag sizes: CPU's differences of offsets, less padding entries --------
  Value padded = padding_idx >= 0 ? b.compare(idx, s64_splat(b, padding_idx, nd), hlo::Compare::kEq)
                                  : b.splat(b.constant_bool(false), nd);
  Value bag_size = s64_splat(b, 0, {bags});
  if (bags > 0) {
    Value ends = b.concatenate({slice1(b, off, 1, bags), s64_splat(b, n, {1})}, 0);
    bag_size = b.binary("subtract", ends, starts);
    if (padding_idx >= 0 && n > 0) {
      Value pad_ids = b.select(padded, bag, s64_splat(b, -1, nd));
      Value pads = segment_scatter(b, b.zeros(TensorType{ElementType::kS64, {1, bags, 1}}),
                                   as_row(b, pad_ids), s64_splat(b, 1, {1, n, 1}), "add");
      bag_size = b.binary("subtract", bag_size, b.reshape(pads, {bags}));
    }
  }

  // --- the reduction ---------------------------------------------------------
  Value use = b.binary("and", b.binary("and", covered, valid_idx), b.unary("not", padded));
  Value ids = as_row(b, b.select(use, bag, s64_splat(b, -1, nd)));
  Value table = rows == 0 ? b.zeros(TensorType{et(wtype), {1, 1, width}}) : b.reshape(weight, {1, rows, width});
  Value looked_up = segment_gather(b, table, as_row(b, idx));  // [1, n, width]
  std::vector<int64_t> out_dims = {1, bags, width};
  Value output, max_indices;
  if (mode != kMax) {
    ElementType acc = et(opmath_type(wtype));
    Value vals = b.convert(looked_up, acc);
    if (weighted) {
      Value w = b.convert(ctx.tensor(6), acc);
      vals = b.binary("multiply", vals, b.broadcast_in_dim(w, {1, n, width}, {1}));
    }
    output = segment_scatter(b, b.zeros(TensorType{acc, out_dims}), ids, vals, "add");
    if (mode == kMean) {
      Value count = b.convert(b.clamp(s64_splat(b, 1, {bags}), bag_size,
                                      s64_splat(b, std::numeric_limits<int64_t>::max(), {bags})),
                              acc);
      output = b.binary("divide", output, b.broadcast_in_dim(count, out_dims, {1}));
    }
    output = b.convert(output, et(wtype));
  } else {
    // CPU keeps a bag's first row, then takes each later row that is larger:
    // NaN when the first is NaN, else the largest non-NaN value, from its
    // first position.
    ElementType t = et(wtype);
    std::vector<int64_t> vd = {1, n, width};
    Value positions = s64_splat(b, n, {1, bags, 1});
    Value first = segment_scatter(b, positions, ids, b.reshape(pos, {1, n, 1}), "minimum");
    Value nonempty = b.compare(first, s64_splat(b, n, {1, bags, 1}), hlo::Compare::kLt);
    nonempty = b.broadcast_in_dim(b.reshape(nonempty, {bags}), out_dims, {1});
    Value first_row = segment_gather(b, looked_up, b.reshape(first, {1, bags}));
    Value first_nan = b.compare(first_row, first_row, hlo::Compare::kNe);
    Value neg_inf = b.splat(b.constant(-std::numeric_limits<double>::infinity(), t), vd);
    Value is_nan = b.compare(looked_up, looked_up, hlo::Compare::kNe);
    Value largest = segment_scatter(b, b.splat(b.constant(-std::numeric_limits<double>::infinity(), t), out_dims),
                                    ids, b.select(is_nan, neg_inf, looked_up), "maximum");
    Value zeros = b.zeros(TensorType{t, out_dims});
    output = b.select(nonempty, b.select(first_nan, first_row, largest), zeros);
    // The first position holding the bag's value, per column.
    Value at_pos = segment_gather(b, output, b.reshape(b.select(use, bag, s64_splat(b, 0, nd)), {1, n}));
    Value hit = b.compare(looked_up, at_pos, hlo::Compare::kEq);
    Value pos_nd = b.broadcast_in_dim(pos, vd, {1});
    Value where = segment_scatter(b, s64_splat(b, n, out_dims), ids,
                                  b.select(hit, pos_nd, s64_splat(b, n, vd)), "minimum");
    where = b.select(first_nan, b.broadcast_in_dim(b.reshape(first, {bags}), out_dims, {1}), where);
    Value word = segment_gather(b, b.reshape(idx, {1, n, 1}), b.reshape(where, {1, bags * width}));
    max_indices = b.select(nonempty, b.reshape(word, out_dims), s64_splat(b, 0, out_dims));
    max_indices = b.convert(b.reshape(max_indices, {bags, width}), it);
  }
  output = b.reshape(output, {bags, width});

  if (ctx.meta_layout()) {
    // A compiled graph: shaped as torch's meta function says for a device
    // that is not the CPU (CUDA's layout), in the indices' dtype: every
    // position's bag, a size per offset, max indices only for max mode.
    ElementType xt = et(ctx.dtype(1));
    Value sizes = b.convert(bag_size, xt);
    if (num_offsets > bags) sizes = b.concatenate({sizes, b.zeros(TensorType{xt, {num_offsets - bags}})}, 0);
    Value maxes = mode == kMax ? b.convert(max_indices, xt) : b.zeros(TensorType{xt, {0}});
    return {output, b.convert(bag, xt), sizes, maxes};
  }
  Value offset2bag = with_offset2bag ? b.convert(bag, it) : b.zeros(TensorType{it, {0}});
  Value sizes = mode == kSum ? b.zeros(TensorType{it, {forward_only ? num_offsets : bags}})
                             : b.convert(bag_size, it);
  if (mode != kMax) max_indices = sizes;
  return {output, offset2bag, sizes, max_indices};
}

// The weight gradient of sum and mean (and per-sample weighted) bags: each
// index position adds its bag's gradient row, scaled, to its weight row.
Value dense_backward_sum_mean(LoweringContext& ctx, Value grad, Value idx, Value bag, Value bag_size,
                              int64_t num_weights, bool scale_grad_by_freq, int64_t mode,
                              int psw_arg, int64_t padding_idx) {
  Builder& b = ctx.b;
  ElementType acc = et(opmath_type(ctx.dtype(0)));
  int64_t n = b.type(idx).numel(), bags = b.dims(grad)[0], width = b.dims(grad)[1];
  std::vector<int64_t> nd = {n};
  Value g = segment_gather(b, b.convert(b.reshape(grad, {1, bags, width}), acc), as_row(b, bag));
  Value scale = b.splat(b.constant(1.0, acc), nd);
  if (!ctx.is_none(psw_arg)) scale = b.convert(b.reshape(ctx.tensor(psw_arg), nd), acc);
  Value in_weights = index_in_range(b, idx, 0, num_weights);
  Value idx_ids = as_row(b, b.select(in_weights, idx, s64_splat(b, -1, nd)));
  if (scale_grad_by_freq) {
    // Divided by the frequency of the row's index (as embedding's backward,
    // CUDA and later CPU releases do).
    Value counts = segment_scatter(b, b.zeros(TensorType{acc, {1, num_weights, 1}}), idx_ids,
                                   b.splat(b.constant(1.0, acc), {1, n, 1}), "add");
    Value freq = b.reshape(segment_gather(b, counts, idx_ids), nd);
    scale = b.binary("divide", scale, freq);
  }
  if (mode == kMean) {
    Value size = b.reshape(segment_gather(b, b.reshape(s64(b, bag_size), {1, bags, 1}), as_row(b, bag)), nd);
    Value nonzero = b.compare(size, s64_splat(b, 0, nd), hlo::Compare::kNe);
    scale = b.select(nonzero, b.binary("divide", scale, b.convert(size, acc)), scale);
  }
  Value use = b.binary("and", in_weights, index_in_range(b, bag, 0, bags));
  if (padding_idx >= 0) {
    use = b.binary("and", use, b.compare(idx, s64_splat(b, padding_idx, nd), hlo::Compare::kNe));
  }
  Value rows = b.binary("multiply", g, b.broadcast_in_dim(scale, {1, n, width}, {1}));
  Value out = segment_scatter(b, b.zeros(TensorType{acc, {1, num_weights, width}}),
                              as_row(b, b.select(use, idx, s64_splat(b, -1, nd))), rows, "add");
  return b.convert(b.reshape(out, {num_weights, width}), et(ctx.dtype(0)));
}

// Max bags: each non-empty bag's gradient goes to the row that held its
// maximum, per column.
Value dense_backward_max(LoweringContext& ctx, Value grad, Value bag_size, Value max_indices,
                         int64_t num_weights) {
  Builder& b = ctx.b;
  ElementType acc = et(opmath_type(ctx.dtype(0)));
  auto gd = b.dims(grad);
  int64_t bags = gd[0], width = gd[1];
  TORCH_CHECK(b.dims(max_indices) == gd, "embedding_bag: max_indices must have the shape of grad");
  Value nonempty = b.compare(s64(b, bag_size), s64_splat(b, 0, {bags}), hlo::Compare::kNe);
  nonempty = b.broadcast_in_dim(nonempty, gd, {0});
  Value mi = s64(b, max_indices);
  Value ok = index_in_range(b, mi, 0, num_weights);
  ctx.require(all_of(b, b.binary("or", b.unary("not", nonempty), ok)), "index out of range in self");
  Value target = b.select(b.binary("and", nonempty, ok), mi, s64_splat(b, num_weights, gd));
  Value column = b.iota(TensorType{ElementType::kS64, gd}, 1);
  std::vector<int64_t> one = {bags, width, 1};
  Value coords = b.concatenate({b.reshape(target, one), b.reshape(column, one)}, 2);
  Builder::ScatterDims sd{{}, {0, 1}, {0, 1}, 2};
  Value out = b.scatter(b.zeros(TensorType{acc, {num_weights + 1, width}}), coords,
                        b.convert(grad, acc), sd, [](Builder& r, const std::vector<Value>& a) {
                          return std::vector<Value>{r.binary("add", a[0], a[1])};
                        });
  out = b.slice(out, {0, 0}, {num_weights, width}, {1, 1});
  return b.convert(out, et(ctx.dtype(0)));
}

Value dense_backward(LoweringContext& ctx, Value bag, int idx_arg, int bag_size_arg, int max_arg,
                     int num_weights_arg, int psw_arg, int padding_arg) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0);
  check_float_type(ctx.dtype(0), "grad_");
  TORCH_CHECK(b.type(grad).rank() == 2, "embedding_bag_backward: grad must be 2-D");
  int64_t num_weights = ctx.int_arg(num_weights_arg);
  int64_t mode = ctx.int_arg(num_weights_arg + 2);
  bool scale_grad_by_freq = ctx.bool_arg(num_weights_arg + 1);
  int64_t bags = b.dims(grad)[0], width = b.dims(grad)[1];
  if (num_weights == 0 || width == 0) return b.zeros(TensorType{et(ctx.dtype(0)), {num_weights, width}});
  // One size per bag: the meta layout (compiled graphs) has one per offset,
  // a trailing one more with include_last_offset.
  Value sizes = ctx.tensor(bag_size_arg);
  if (b.type(sizes).rank() == 1 && b.dims(sizes)[0] > bags) sizes = slice1(b, sizes, 0, bags);
  if (mode == kMax) {
    if (bags == 0) return b.zeros(TensorType{et(ctx.dtype(0)), {num_weights, width}});
    return dense_backward_max(ctx, grad, sizes, ctx.tensor(max_arg), num_weights);
  }
  TORCH_CHECK(mode == kSum || mode == kMean, "embedding_bag: unknown mode ", mode);
  Value idx = b.reshape(s64(b, ctx.tensor(idx_arg)), {b.type(ctx.tensor(idx_arg)).numel()});
  return dense_backward_sum_mean(ctx, grad, idx, bag, sizes, num_weights,
                                 scale_grad_by_freq, mode, psw_arg, ctx.int_arg(padding_arg));
}

LoweringRegistrar registrar([] {
  // _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode,
  // sparse, per_sample_weights, include_last_offset, padding_idx) ->
  // (output, offset2bag, bag_size, max_indices). The forward-only variant
  // differs in the shape of sum mode's bag_size placeholder.
  register_lowering("aten::_embedding_bag", [](LoweringContext& ctx) {
    return embedding_bag(ctx, /*forward_only=*/false);
  }, {"aten::_embedding_bag.out"});
  register_lowering("aten::_embedding_bag_forward_only", [](LoweringContext& ctx) {
    return embedding_bag(ctx, /*forward_only=*/true);
  }, {"aten::_embedding_bag_forward_only.out"});

  // _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
  // maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
  // per_sample_weights, padding_idx): what autograd calls on this device.
  register_lowering("aten::_embedding_bag_backward", [](LoweringContext& ctx) {
    TORCH_CHECK_NOT_IMPLEMENTED(!ctx.bool_arg(9), "embedding_bag: sparse gradients are not "
                                "supported on the tpu device; use sparse=False");
    Value bag = bags_for_backward(ctx, ctx.tensor(1), 2, 3);
    return std::vector<Value>{dense_backward(ctx, bag, 1, 4, 5, 6, 10, 11)};
  });
  // _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size,
  // maximum_indices, num_weights, scale_grad_by_freq, mode,
  // per_sample_weights, padding_idx)
  register_lowering("aten::_embedding_bag_dense_backward", [](LoweringContext& ctx) {
    Value bag = bags_for_backward(ctx, ctx.tensor(1), -1, 2);
    return std::vector<Value>{dense_backward(ctx, bag, 1, 3, 4, 5, 8, 9)};
  }, {"aten::_embedding_bag_dense_backward.out"});

  // _embedding_bag_per_sample_weights_backward(grad, weight, indices,
  // offsets, offset2bag, mode, padding_idx): per index position, the dot
  // product of its bag's gradient and its weight row.
  register_lowering("aten::_embedding_bag_per_sample_weights_backward", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    TORCH_CHECK(ctx.int_arg(5) == kSum,
                "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
    check_float_type(ctx.dtype(0), "grad");
    Value grad = ctx.tensor(0), weight = ctx.tensor(1);
    TORCH_CHECK(b.type(grad).rank() == 2 && b.type(weight).rank() == 2 &&
                    b.dims(grad)[1] == b.dims(weight)[1],
                "embedding_bag_backward: grad and weight must be 2-D with the same width");
    int64_t n = b.type(ctx.tensor(2)).numel();
    int64_t bags = b.dims(grad)[0], rows = b.dims(weight)[0], width = b.dims(grad)[1];
    std::vector<int64_t> nd = {n};
    Value idx = b.reshape(s64(b, ctx.tensor(2)), nd);
    Value bag = bags_for_backward(ctx, idx, 3, 4);
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value g = segment_gather(b, b.convert(b.reshape(grad, {1, bags, width}), acc), as_row(b, bag));
    Value w = segment_gather(b, b.convert(b.reshape(weight, {1, rows, width}), acc), as_row(b, idx));
    Value dot = b.reshape(reduce(b, b.binary("multiply", g, w), {2}, ReduceKind::kSum), nd);
    Value use = b.binary("and", index_in_range(b, bag, 0, bags), index_in_range(b, idx, 0, rows));
    int64_t padding_idx = ctx.int_arg(6);
    if (padding_idx >= 0) {
      use = b.binary("and", use, b.compare(idx, s64_splat(b, padding_idx, nd), hlo::Compare::kNe));
    }
    Value out = b.select(use, dot, b.zeros(TensorType{acc, nd}));
    return std::vector<Value>{b.convert(out, et(ctx.dtype(0)))};
  }, {"aten::_embedding_bag_per_sample_weights_backward.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
