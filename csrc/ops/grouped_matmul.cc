// _grouped_mm: one matrix product per group, the groups given by offsets
// (cumulative ends, int32) along the ragged dimension. Mixture-of-experts
// layers sort their tokens by expert and multiply each expert's rows by its
// weights in one call; autograd's backward is _grouped_mm again, in the
// other layouts. The layouts:
//   2-D x 3-D: rows of self split by offs, group g times mat2[g]   -> [M, N]
//   3-D x 2-D: columns of mat2 split by offs, self[g] times them   -> [M, N]
//   2-D x 2-D: the contracted dim split by offs, one product each  -> [G, M, N]
//   3-D x 3-D: a batched product, no offsets                       -> [B, M, N]
// The 2-D x 3-D layout gathers each row's group weights when there are many
// groups and that copy is small; otherwise, and in the other ragged layouts, it is a dense product
// with a one-hot group mask folded into the contraction. Accumulation is in
// f32 for bf16/f16; rows, columns or slices past the last offset are zeros.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

// 2-D x 3-D gathers each row's weights, instead of multiplying every row by
// every group's, up to this many rows x K x N (64 MiB of float32) and from
// this many groups up: with few groups the dense products cost less than
// the copy (measured on the CPU plugin, benchmarks/moe.py).
constexpr int64_t kGatherLimit = int64_t{1} << 24;
constexpr int64_t kGatherMinGroups = 16;

// group[i] = number of offsets <= i: the group index i falls in, for each
// i < length (G where i is past the last offset).
Value group_of_each(Builder& b, Value offs, int64_t length) {
  int64_t groups = b.dims(offs)[0];
  Value positions = b.iota(TensorType{ElementType::kS32, {length, groups}}, 0);
  Value ends = b.broadcast_in_dim(offs, {length, groups}, {1});
  Value past = b.convert(b.compare(positions, ends, hlo::Compare::kGe), ElementType::kS32);
  return reduce(b, past, {1}, ReduceKind::kSum);  // [length]
}

// mask[g, i] (or [i, g] when `group_last`) = 1 where i belongs to group g.
Value one_hot_groups(Builder& b, Value offs, int64_t length, ElementType type, bool group_last) {
  int64_t groups = b.dims(offs)[0];
  Value group = group_of_each(b, offs, length);
  std::vector<int64_t> dims = group_last ? std::vector<int64_t>{length, groups}
                                         : std::vector<int64_t>{groups, length};
  Value g = b.iota(TensorType{ElementType::kS32, dims}, group_last ? 1 : 0);
  Value of = b.broadcast_in_dim(group, dims, {group_last ? int64_t{0} : int64_t{1}});
  return b.convert(b.compare(g, of, hlo::Compare::kEq), type);
}

Value grouped_mm(LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0), w = ctx.tensor(1);
  c10::ScalarType dtype = ctx.dtype(0);
  int64_t rx = b.type(x).rank(), rw = b.type(w).rank();
  TORCH_CHECK(rx == 2 || rx == 3, "mat_a has to be 2 or 3d");
  TORCH_CHECK(rw == 2 || rw == 3, "mat_b has to be 2 or 3d");
  auto floating = [](c10::ScalarType t) {
    return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf;
  };
  TORCH_CHECK(floating(dtype), "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got ",
              c10::toString(dtype));
  TORCH_CHECK(floating(ctx.dtype(1)), "Expected mat_b to be Float32, BFloat16 or Float16 matrix, got ",
              c10::toString(ctx.dtype(1)));
  TORCH_CHECK(ctx.dtype(1) == dtype, "Expected mat_a and mat_b to have the same dtype, got ",
              c10::toString(dtype), " and ", c10::toString(ctx.dtype(1)));
  bool has_offs = !ctx.is_none(2);
  TORCH_CHECK(has_offs == (rx == 2 || rw == 2),
              "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d");
  TORCH_CHECK(ctx.is_none(3), "Bias tensor provided, but it is not supported yet.");
  auto out_dtype = ctx.optional_dtype(4);
  TORCH_CHECK(!out_dtype || *out_dtype == dtype,
              "Grouped gemm output dtype must match `mat_a` dtype");
  const auto& dx = b.dims(x);
  const auto& dw = b.dims(w);
  TORCH_CHECK(dx[rx - 1] == dw[rw - 2], "contraction dimension of mat_a and mat_b must match");
  ElementType acc = et(opmath_type(dtype));
  Value xa = b.convert(x, acc), wa = b.convert(w, acc);
  Value out;
  if (!has_offs) {  // 3-D x 3-D
    TORCH_CHECK(dx[0] == dw[0], "batched dimension has to match");
    out = b.dot_general(xa, wa, {0}, {0}, {2}, {1}, acc);
  } else {
    Value offs = ctx.tensor(2);
    TORCH_CHECK(ctx.dtype(2) == c10::kInt, "Offsets have to be int32");
    TORCH_CHECK(b.type(offs).rank() == 1, "Offsets tensor must be 1D, but got offs.dim()=",
                b.type(offs).rank(), ".");
    int64_t groups = b.dims(offs)[0];
    if (rx == 2 && rw == 3) {
      TORCH_CHECK(groups == dw[0], "matrix batch sizes have to match");
      int64_t m = dx[0], k = dx[1], n = dw[2];
      if (groups >= kGatherMinGroups && m * k * n <= kGatherLimit) {
        // Each row against its own group's weights, gathered: the useful
        // work only, where the copy is small (decode-sized batches).
        Value group = group_of_each(b, offs, m);  // [M], G past the last offset
        Value last = b.splat(b.constant_int(groups - 1, ElementType::kS32), {m});
        Value clamped = b.select(b.compare(group, last, hlo::Compare::kGt), last, group);
        Builder::GatherDims gd{{1, 2}, {0}, {0}, 1};
        Value mine = b.gather(wa, b.reshape(clamped, {m, 1}), gd, {1, k, n}, {m, k, n});
        out = b.dot_general(xa, mine, {0}, {0}, {1}, {1}, acc);  // [M, N]
        Value inside = b.compare(group, b.splat(b.constant_int(groups, ElementType::kS32), {m}),
                                 hlo::Compare::kLt);
        out = b.select(b.broadcast_in_dim(inside, {m, n}, {0}), out,
                       b.zeros(TensorType{acc, {m, n}}));
      } else {
        // Every row against every group's weights, then each row keeps its own.
        Value all = b.dot_general(xa, wa, {}, {}, {1}, {1}, acc);  // [M, G, N]
        Value mask = one_hot_groups(b, offs, m, acc, /*group_last=*/true);  // [M, G]
        out = b.dot_general(mask, all, {0}, {0}, {1}, {1}, acc);  // [M, N]
      }
    } else if (rx == 3 && rw == 2) {
      TORCH_CHECK(groups == dx[0], "matrix batch sizes have to match");
      int64_t n = dw[1];
      Value all = b.dot_general(xa, wa, {}, {}, {2}, {0}, acc);  // [G, M, N]
      Value mask = one_hot_groups(b, offs, n, acc, /*group_last=*/false);  // [G, N]
      Value spread = b.broadcast_in_dim(mask, b.dims(all), {0, 2});
      out = reduce(b, b.binary("multiply", all, spread), {0}, ReduceKind::kSum);
    } else {  // 2-D x 2-D: the contracted dim is ragged
      int64_t k = dx[1];
      Value mask = one_hot_groups(b, offs, k, acc, /*group_last=*/false);  // [G, K]
      std::vector<int64_t> gmk{groups, dx[0], k};
      Value masked = b.binary("multiply", b.broadcast_in_dim(xa, gmk, {1, 2}),
                              b.broadcast_in_dim(mask, gmk, {0, 2}));
      out = b.dot_general(masked, wa, {}, {}, {2}, {0}, acc);  // [G, M, N]
    }
  }
  return b.convert(out, et(dtype));
}

LoweringRegistrar registrar([] {
  // _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None)
  register_lowering("aten::_grouped_mm", [](LoweringContext& ctx) {
    return std::vector<Value>{grouped_mm(ctx)};
  });
});

}  // namespace
}  // namespace torch_pjrt::ops
