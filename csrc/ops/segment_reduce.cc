// segment_reduce (torch._segment_reduce) and _segment_reduce_backward: sum,
// mean, max, min and prod over consecutive segments along `axis`, given by
// lengths or offsets (batched over the dims before `axis`). The data is
// viewed as [O, M, I] (dims before, along and after axis); the segment of
// each of the M positions is computed on the device (ops/segments.h), each
// reduction combines the positions into their segments and each gradient
// reads its segment's values back per position. Empty segments take
// `initial` or the identity (-inf for max, NaN for mean) as on CPU; the
// lengths are checked on the device as CPU checks them.
#include <c10/core/Scalar.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/ordering.h"
#include "ops/segments.h"

namespace torch_pjrt::ops {
namespace {

enum class Reduction { kSum, kMean, kMax, kMin, kProd };

Reduction reduction_of(const std::string& name) {
  if (name == "sum") return Reduction::kSum;
  if (name == "mean") return Reduction::kMean;
  if (name == "max" || name == "amax") return Reduction::kMax;
  if (name == "min" || name == "amin") return Reduction::kMin;
  if (name == "prod") return Reduction::kProd;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", name);
  return Reduction::kSum;
}

// `initial` converted to the data's dtype as CPU converts it (an error when
// it overflows), as a double.
double initial_value(const c10::IValue& v, c10::ScalarType type) {
  c10::Scalar s = v.toScalar();
  switch (type) {
    case at::kDouble: return s.to<double>();
    case at::kFloat: return s.to<float>();
    case at::kHalf: return static_cast<float>(s.to<at::Half>());
    case at::kBFloat16: return static_cast<float>(s.to<at::BFloat16>());
    default: return s.toDouble();
  }
}

// Where the segments lie: data as [O, M, I], the segments' lengths [O, S],
// and the segment of each position [O, M] (-1 for positions in none).
struct Segments {
  std::vector<int64_t> dims;  // data's dims
  int64_t axis = 0, outer = 1, inner = 1, count = 0;
  Value lengths;              // [O, S] s64
  Value ids;                  // [O, M] s64
};

// `index` holds lengths (`is_lengths`) or offsets, shaped dims[:axis] + [K];
// only its first O rows are read (as CPU reads them).
Segments locate(LoweringContext& ctx, Value data, Value index, bool is_lengths, int64_t axis_arg,
                bool check, bool unsafe) {
  Builder& b = ctx.b;
  const char* name = is_lengths ? "lengths" : "offsets";
  Segments s;
  s.dims = b.dims(data);
  int64_t rank = static_cast<int64_t>(s.dims.size());
  s.axis = wrap_dim(axis_arg, rank);
  auto idims = b.dims(index);
  int64_t irank = static_cast<int64_t>(idims.size());
  TORCH_CHECK(rank >= irank, "segment_reduce(): Expected data.dim() >= ", name, ".dim(), got ", rank,
              " and ", irank, ".");
  TORCH_CHECK(s.axis == irank - 1, "segment_reduce(): Expected axis to be the last dimension of ",
              name, " but got ", s.axis, ".");
  for (int64_t d = 0; d < s.axis; ++d) s.outer *= s.dims[d];
  for (int64_t d = s.axis + 1; d < rank; ++d) s.inner *= s.dims[d];
  int64_t m = s.dims[s.axis], k = idims.back(), index_rows = 1;
  for (int64_t d = 0; d + 1 < irank; ++d) index_rows *= idims[d];
  TORCH_CHECK(index_rows >= s.outer, "segment_reduce(): Expected ", name, " to have a row for each of ",
              "the ", s.outer, " positions of data before axis, got ", index_rows);
  TORCH_CHECK(is_lengths || k >= 1, "segment_reduce(): Expected offsets to have at least one element along axis");
  s.count = is_lengths ? k : k - 1;
  Value all = b.reshape(b.convert(index, ElementType::kS64), {index_rows, k});
  if (check && is_lengths && !unsafe) {
    TORCH_CHECK(index_rows * k > 0, "min(): Expected reduction dim to be specified for input.numel() "
                "== 0. Specify the reduction dim with the 'dim' argument.");
    ctx.require(all_of(b, b.compare(all, s64_splat(b, 0, {index_rows, k}), hlo::Compare::kGe)),
                "lengths contains negative value!", /*index_error=*/false);
    Value sums = reduce(b, all, {1}, ReduceKind::kSum);
    ctx.require(all_of(b, b.compare(sums, s64_splat(b, m, {index_rows}), hlo::Compare::kEq)),
                "segment_reduce(): Expected all rows of lengths along axis to sum to "
                "data.size(lengths.dim()-1) when !unsafe.",
                /*index_error=*/false);
  }
  Value rows = b.slice(all, {0, 0}, {s.outer, k}, {1, 1});
  int64_t o = s.outer, c = s.count;
  Value starts;
  if (is_lengths) {
    s.lengths = rows;
    starts = c == 0 ? rows : b.binary("subtract", scan(b, rows, 1, "add", 0), rows);
  } else {
    starts = b.slice(rows, {0, 0}, {o, c}, {1, 1});
    s.lengths = b.binary("subtract", b.slice(rows, {0, 1}, {o, k}, {1, 1}), starts);
  }
  if (check) {
    ctx.require(all_of(b, b.compare(s.lengths, s64_splat(b, 0, {o, c}), hlo::Compare::kGe)),
                "segment_reduce(): Expected segment_length >= 0", /*index_error=*/false);
  }
  // A position lies in a segment when more segments start than end at or
  // before it, and then in the last segment starting at or before it.
  Value started = count_up_to(b, starts, m);
  Value ended = count_up_to(b, b.binary("add", starts, s.lengths), m);
  Value seg = b.binary("subtract", started, s64_splat(b, 1, {o, m}));
  Value inside = b.compare(started, ended, hlo::Compare::kGt);
  s.ids = b.select(inside, seg, s64_splat(b, -1, {o, m}));
  return s;
}

// The index tensor: lengths take precedence over offsets, as on CPU.
std::pair<Value, bool> index_arg(LoweringContext& ctx, size_t lengths, size_t offsets) {
  bool is_lengths = !ctx.is_none(lengths);
  TORCH_CHECK(is_lengths || !ctx.is_none(offsets), "segment_reduce(): Either lengths or offsets must be defined.");
  size_t arg = is_lengths ? lengths : offsets;
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.dtype(arg) == at::kLong || ctx.dtype(arg) == at::kInt,
                              "\"_segment_reduce_", is_lengths ? "lengths" : "offsets",
                              "_cpu_kernel1\" not implemented for '", c10::toString(ctx.dtype(arg)), "'");
  return {ctx.tensor(arg), is_lengths};
}

void check_data_type(c10::ScalarType type) {
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kFloat || type == at::kDouble || type == at::kHalf ||
                                  type == at::kBFloat16,
                              "\"_segment_reduce_cpu\" not implemented for '", c10::toString(type), "'");
}

std::vector<int64_t> output_dims(const Segments& s) {
  std::vector<int64_t> out = s.dims;
  out[s.axis] = s.count;
  return out;
}

// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)
Value segment_reduce(LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value data = ctx.tensor(0);
  c10::ScalarType type = ctx.dtype(0);
  Reduction red = reduction_of(ctx.ivalue(1).toStringRef());
  TORCH_CHECK(ctx.is_none(3), "segment_reduce(): indices based reduction is not supported yet.");
  auto [index, is_lengths] = index_arg(ctx, 2, 4);
  check_data_type(type);
  Segments s = locate(ctx, data, index, is_lengths, ctx.int_arg(5), /*check=*/true, ctx.bool_arg(6));
  bool has_initial = !ctx.is_none(7);
  std::vector<int64_t> out = output_dims(s);
  int64_t o = s.outer, c = s.count, m = s.dims[s.axis], in = s.inner;
  if (o * c * in == 0) return b.zeros(TensorType{et(type), out});

  ElementType t = et(type);
  bool exact = red == Reduction::kMax || red == Reduction::kMin;
  ElementType acc = exact ? t : et(opmath_type(type));
  double inf = std::numeric_limits<double>::infinity();
  double identity = red == Reduction::kMax ? -inf : red == Reduction::kMin ? inf
                  : red == Reduction::kProd ? 1.0 : 0.0;
  double init = has_initial ? initial_value(ctx.ivalue(7), type) : identity;
  const char* op = red == Reduction::kMax ? "nan_maximum" : red == Reduction::kMin ? "nan_minimum"
                 : red == Reduction::kProd ? "multiply" : "add";
  std::vector<int64_t> table_dims = {o, c, in};
  Value x = b.convert(b.reshape(data, {o, m, in}), acc);
  Value r = segment_scatter(b, b.splat(b.convert(b.constant(init, t), acc), table_dims), s.ids, x, op);
  if (red == Reduction::kMean) {
    Value len = b.broadcast_in_dim(s.lengths, table_dims, {0, 1});
    Value nonempty = b.compare(len, s64_splat(b, 0, table_dims), hlo::Compare::kGt);
    Value empty_value = has_initial ? r : b.splat(b.constant(std::nan(""), acc), table_dims);
    r = b.select(nonempty, b.binary("divide", r, b.convert(len, acc)), empty_value);
  }
  return b.reshape(b.convert(r, t), out);
}

// _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets, axis, initial)
Value segment_reduce_backward(LoweringContext& ctx) {
  Builder& b = ctx.b;
  c10::ScalarType type = ctx.dtype(0);
  check_data_type(type);
  Value data = ctx.tensor(2);
  Reduction red = reduction_of(ctx.ivalue(3).toStringRef());
  auto [index, is_lengths] = index_arg(ctx, 4, 5);
  Segments s = locate(ctx, data, index, is_lengths, ctx.int_arg(6), /*check=*/false, true);
  int64_t o = s.outer, c = s.count, m = s.dims[s.axis], in = s.inner;
  std::vector<int64_t> table_dims = {o, c, in}, dd = {o, m, in};
  ElementType acc = et(opmath_type(type));
  if (o * m * in == 0 || c == 0) return b.zeros(TensorType{et(type), s.dims});
  TORCH_CHECK(b.dims(ctx.tensor(0)) == output_dims(s) && b.dims(ctx.tensor(1)) == output_dims(s),
              "segment_reduce_backward: grad and output must have the output's shape");

  Value x = b.convert(b.reshape(data, dd), acc);
  auto per_position = [&](Value table) { return segment_gather(b, table, s.ids); };
  auto scatter_count = [&](Value pred) {
    Value ones = b.select(pred, b.splat(b.constant(1.0, acc), dd), b.zeros(TensorType{acc, dd}));
    return per_position(segment_scatter(b, b.zeros(TensorType{acc, table_dims}), s.ids, ones, "add"));
  };
  Value g = per_position(b.convert(b.reshape(ctx.tensor(0), table_dims), acc));
  Value zeros = b.zeros(TensorType{acc, dd});
  Value r;
  switch (red) {
    case Reduction::kSum: r = g; break;
    case Reduction::kMean: {
      Value len = per_position(b.convert(b.reshape(s.lengths, {o, c, 1}), acc));
      r = b.binary("divide", g, b.broadcast_in_dim(b.reshape(len, {o, m}), dd, {0, 1}));
      break;
    }
    case Reduction::kMax:
    case Reduction::kMin: {
      // Every element equal to the result (or NaN) gets the gradient; when
      // several do, CPU splits only positive gradients among them.
      Value out = per_position(b.convert(b.reshape(ctx.tensor(1), table_dims), acc));
      Value chosen = b.binary("or", b.compare(x, x, hlo::Compare::kNe), b.compare(x, out, hlo::Compare::kEq));
      Value count = scatter_count(chosen);
      Value split = b.binary("and", b.compare(count, b.splat(b.constant(2.0, acc), dd), hlo::Compare::kGe),
                             b.compare(g, zeros, hlo::Compare::kGt));
      r = b.select(chosen, b.select(split, b.binary("divide", g, count), g), zeros);
      break;
    }
    case Reduction::kProd: {
      // grad * output / x, except for zeros and NaNs, which get the product
      // of the others (and `initial`).
      Value out = per_position(b.convert(b.reshape(ctx.tensor(1), table_dims), acc));
      Value one = b.splat(b.constant(1.0, acc), dd);
      Value is_nan = b.compare(x, x, hlo::Compare::kNe);
      Value is_zero = b.compare(x, zeros, hlo::Compare::kEq);
      Value special = b.binary("or", is_nan, is_zero);
      double init = ctx.is_none(7) ? 1.0 : initial_value(ctx.ivalue(7), type);
      Value others = per_position(segment_scatter(b, b.splat(b.convert(b.constant(init, et(type)), acc), table_dims),
                                                  s.ids, b.select(special, one, x), "multiply"));
      Value zero_count = scatter_count(is_zero), nan_count = scatter_count(is_nan);
      Value other_zeros = b.binary("subtract", zero_count, b.select(is_zero, one, zeros));
      Value other_nans = b.binary("subtract", nan_count, b.select(is_nan, one, zeros));
      Value factor = b.select(b.compare(other_nans, zeros, hlo::Compare::kGt),
                              b.splat(b.constant(std::nan(""), acc), dd),
                              b.select(b.compare(other_zeros, zeros, hlo::Compare::kGt), zeros, one));
      Value exclusive = b.binary("multiply", others, factor);
      r = b.select(special, b.binary("multiply", g, exclusive),
                   b.binary("divide", b.binary("multiply", g, out), x));
      break;
    }
  }
  Value member = b.compare(s.ids, s64_splat(b, 0, {o, m}), hlo::Compare::kGe);
  r = b.select(b.broadcast_in_dim(member, dd, {0, 1}), r, zeros);
  return b.reshape(b.convert(r, et(type)), s.dims);
}

LoweringRegistrar registrar([] {
  // `initial` decides the program (present or not, and its value is checked
  // for overflow as CPU does), so it is static.
  register_lowering("aten::segment_reduce", [](LoweringContext& ctx) {
    return std::vector<Value>{segment_reduce(ctx)};
  }, {"aten::segment_reduce.out"}, /*static_scalars=*/{7});
  register_lowering("aten::_segment_reduce_backward", [](LoweringContext& ctx) {
    return std::vector<Value>{segment_reduce_backward(ctx)};
  }, {"aten::_segment_reduce_backward.out"}, /*static_scalars=*/{7});
});

}  // namespace
}  // namespace torch_pjrt::ops
