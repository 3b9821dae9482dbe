// nonzero_static(self, size, fill_value=-1): the coordinates of the first
// `size` non-zero elements in row-major order, [size, ndim], rows past the
// count filled with fill_value. Its shape is static, unlike nonzero's: a
// stable sort puts the non-zero positions first, in order.
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

LoweringRegistrar registrar([] {
  register_lowering("aten::nonzero_static", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto in = b.dims(x);
    int64_t rank = static_cast<int64_t>(in.size());
    int64_t size = ctx.int_arg(1);
    TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
    int64_t fill = ctx.int_arg(2);
    int64_t n = b.type(x).numel();
    auto s64 = [&](int64_t v, std::vector<int64_t> dims) {
      return b.splat(b.constant_int(v, ElementType::kS64), dims);
    };
    if (rank == 0 || size == 0 || n == 0) {
      // No coordinates to give (rank 0), no rows, or no elements: fill only.
      return std::vector<Value>{s64(fill, {size, rank})};
    }
    Value flat = b.reshape(x, {n});
    Value nonzero = b.compare(flat, b.zeros(b.type(flat)), hlo::Compare::kNe);
    Value key = b.convert(b.unary("not", nonzero), ElementType::kU8);
    Value pos = b.iota(TensorType{ElementType::kS64, {n}}, 0);
    Value order = b.sort({key, pos}, 0, /*stable=*/true, [](Builder& r, const std::vector<Value>& a) {
      return std::vector<Value>{r.compare(a[0], a[1], hlo::Compare::kLt)};
    })[1];
    int64_t kept = std::min(size, n);
    order = b.slice(order, {0}, {kept}, {1});
    if (kept < size) order = b.pad(order, b.constant_int(0, ElementType::kS64), {0}, {size - kept}, {0});
    // Flat positions to coordinates, last dim fastest.
    std::vector<Value> columns;
    int64_t stride = n;
    for (int64_t d = 0; d < rank; ++d) {
      stride /= in[d];
      Value c = b.binary("remainder", b.binary("divide", order, s64(stride, {size})), s64(in[d], {size}));
      columns.push_back(b.reshape(c, {size, 1}));
    }
    Value coords = b.concatenate(columns, 1);
    Value count = reduce(b, b.convert(nonzero, ElementType::kS64), {0}, ReduceKind::kSum);
    Value row = b.iota(TensorType{ElementType::kS64, {size, rank}}, 0);
    Value valid = b.compare(row, b.broadcast_in_dim(count, {size, rank}, {}), hlo::Compare::kLt);
    return std::vector<Value>{b.select(valid, coords, s64(fill, {size, rank}))};
  }, {"aten::nonzero_static.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
