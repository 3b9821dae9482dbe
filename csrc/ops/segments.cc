#include "ops/segments.h"

#include "ops/ordering.h"

namespace torch_pjrt::ops {

Value s64_splat(Builder& b, int64_t value, const std::vector<int64_t>& dims) {
  return b.splat(b.constant_int(value, ElementType::kS64), dims);
}

Value all_of(Builder& b, Value pred) {
  if (b.type(pred).numel() == 0) return b.constant_bool(true);
  return reduce(b, pred, all_dims(b.type(pred).rank()), ReduceKind::kAnd);
}

Value index_in_range(Builder& b, Value x, int64_t lo, int64_t hi) {
  auto dims = b.dims(x);
  return b.binary("and", b.compare(x, s64_splat(b, lo, dims), hlo::Compare::kGe),
                  b.compare(x, s64_splat(b, hi, dims), hlo::Compare::kLt));
}

namespace {

// [O, M, 2] coordinates (o, ids[o, m]).
Value row_coordinates(Builder& b, Value ids) {
  auto dims = b.dims(ids);
  Value rows = b.iota(TensorType{ElementType::kS64, dims}, 0);
  std::vector<int64_t> one = {dims[0], dims[1], 1};
  return b.concatenate({b.reshape(rows, one), b.reshape(ids, one)}, 2);
}

}  // namespace

Value count_up_to(Builder& b, Value values, int64_t length) {
  auto vd = b.dims(values);
  int64_t o = vd[0], s = vd[1];
  if (length == 0 || o == 0 || s == 0) return s64_splat(b, 0, {o, length});
  if (o * s * length <= (int64_t{1} << 16)) {
    std::vector<int64_t> cube = {o, length, s};
    Value v = b.broadcast_in_dim(values, cube, {0, 2});
    Value m = b.iota(TensorType{ElementType::kS64, cube}, 1);
    Value counted = b.binary("and", b.compare(v, m, hlo::Compare::kLe),
                             b.compare(v, s64_splat(b, 0, cube), hlo::Compare::kGe));
    Value ones = b.select(counted, s64_splat(b, 1, cube), s64_splat(b, 0, cube));
    return reduce(b, ones, {2}, ReduceKind::kSum);
  }
  // One mark per value at its position (length + 1 slots: a value at the
  // end marks nothing), then the running count of marks.
  Value marks = segment_scatter(b, b.zeros(TensorType{ElementType::kS64, {o, length + 1, 1}}),
                                values, s64_splat(b, 1, {o, s, 1}), "add");
  marks = b.slice(b.reshape(marks, {o, length + 1}), {0, 0}, {o, length}, {1, 1});
  return scan(b, marks, 1, "add", 0);
}

Value segment_of(Builder& b, Value starts, int64_t length) {
  int64_t o = b.dims(starts)[0];
  return b.binary("subtract", count_up_to(b, starts, length), s64_splat(b, 1, {o, length}));
}

namespace {

constexpr int64_t kSmall = int64_t{1} << 16;  // elements compared pairwise at most

Value combine(Builder& r, const std::string& op, Value a, Value b) {
  if (op != "nan_maximum" && op != "nan_minimum") return r.binary(op, a, b);
  // NaN wins, whichever side it is on.
  Value m = r.binary(op == "nan_maximum" ? "maximum" : "minimum", a, b);
  Value a_nan = r.compare(a, a, hlo::Compare::kNe), b_nan = r.compare(b, b, hlo::Compare::kNe);
  return r.select(a_nan, a, r.select(b_nan, b, m));
}

ReduceKind kind_of(const std::string& op) {
  if (op == "add") return ReduceKind::kSum;
  if (op == "multiply") return ReduceKind::kProd;
  return op == "maximum" || op == "nan_maximum" ? ReduceKind::kMax : ReduceKind::kMin;
}

}  // namespace

Value segment_scatter(Builder& b, Value table, Value ids, Value updates, const std::string& op) {
  auto td = b.dims(table);
  auto ud = b.dims(updates);
  if (b.type(table).numel() == 0 || b.type(updates).numel() == 0) return table;
  ElementType t = b.element_type(table);
  hlo::RegionFn body = [op](Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{combine(r, op, a[0], a[1])};
  };
  if (td[0] * td[1] * ud[1] * td[2] <= kSmall) {
    // Small: every (row, position) pair, with the identity where the
    // position is not the row's, reduced over the positions.
    std::vector<int64_t> cube = {td[0], td[1], ud[1], td[2]};
    Value mine = b.compare(b.broadcast_in_dim(ids, cube, {0, 2}),
                           b.iota(TensorType{ElementType::kS64, cube}, 1), hlo::Compare::kEq);
    Value identity = reduce_init(b, t, kind_of(op));
    Value picked = b.select(mine, b.broadcast_in_dim(updates, cube, {0, 2, 3}), b.splat(identity, cube));
    Value folded = b.reduce({picked}, {identity}, {2}, body)[0];
    return combine(b, op, table, folded);
  }
  // Left-out positions go to a spare row past the end, sliced off after.
  Value spare = b.constant(0, t);
  Value padded = b.pad(table, spare, {0, 0, 0}, {0, 1, 0}, {0, 0, 0});
  Value target = b.select(index_in_range(b, ids, 0, td[1]), ids, s64_splat(b, td[1], b.dims(ids)));
  Builder::ScatterDims sd{{2}, {0, 1}, {0, 1}, 2};
  Value out = b.scatter(padded, row_coordinates(b, target), updates, sd, body);
  return b.slice(out, {0, 0, 0}, td, {1, 1, 1});
}

Value segment_gather(Builder& b, Value table, Value ids) {
  auto td = b.dims(table);
  auto id = b.dims(ids);
  std::vector<int64_t> out = {id[0], id[1], td[2]};
  if (td[1] == 0 || b.type(ids).numel() == 0 || td[2] == 0) {
    return b.zeros(TensorType{b.element_type(table), out});
  }
  Value clamped = b.clamp(s64_splat(b, 0, id), ids, s64_splat(b, td[1] - 1, id));
  if (id[0] * id[1] * td[1] * td[2] <= kSmall) {
    // Small: the sum of the table's rows, all but the wanted one zeroed.
    std::vector<int64_t> cube = {id[0], id[1], td[1], td[2]};
    Value mine = b.compare(b.broadcast_in_dim(clamped, cube, {0, 1}),
                           b.iota(TensorType{ElementType::kS64, cube}, 2), hlo::Compare::kEq);
    Value picked = b.select(mine, b.broadcast_in_dim(table, cube, {0, 2, 3}),
                            b.zeros(TensorType{b.element_type(table), cube}));
    return reduce(b, picked, {2}, ReduceKind::kSum);
  }
  Builder::GatherDims gd{{2}, {0, 1}, {0, 1}, 2};
  return b.gather(table, row_coordinates(b, clamped), gd, {1, 1, td[2]}, out);
}

}  // namespace torch_pjrt::ops
