// Shape ops that move data: cat. The pure views (view, permute, transpose,
// expand, select, slice, narrow, squeeze, unsqueeze, split, chunk) are
// metadata in torch and need no lowering; reading them runs a view program.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

LoweringRegistrar registrar([] {
  register_lowering("aten::cat", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    std::vector<Value> xs = ctx.tensor_list(0);
    const auto& dtypes = ctx.arg(0).dtypes;
    TORCH_CHECK(!xs.empty(), "torch.cat(): expected a non-empty list of Tensors");
    c10::ScalarType type = dtypes[0];
    for (c10::ScalarType t : dtypes) type = c10::promoteTypes(type, t);
    // Legacy behaviour: 1-D empty tensors are skipped whatever the rank.
    std::vector<Value> kept;
    for (Value x : xs) {
      if (!(b.type(x).rank() == 1 && b.dims(x)[0] == 0)) kept.push_back(convert(b, x, type));
    }
    if (kept.empty()) return std::vector<Value>{convert(b, xs[0], type)};
    int64_t rank = b.type(kept[0]).rank();
    TORCH_CHECK(rank > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
    int64_t dim = wrap_dim(ctx.int_arg(1), rank);
    for (size_t i = 0; i < kept.size(); ++i) {
      const auto& d = b.dims(kept[i]);
      TORCH_CHECK(static_cast<int64_t>(d.size()) == rank, "Tensors must have same number of "
                  "dimensions: got ", rank, " and ", d.size());
      for (int64_t k = 0; k < rank; ++k) {
        TORCH_CHECK(k == dim || d[k] == b.dims(kept[0])[k], "Sizes of tensors must match except "
                    "in dimension ", dim, ". Expected size ", b.dims(kept[0])[k], " but got size ",
                    d[k], " for tensor number ", i, " in the list.");
      }
    }
    return std::vector<Value>{b.concatenate(kept, dim)};
  }, {"aten::cat.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
