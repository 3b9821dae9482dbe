// Sparse COO tensors on the device: a sparse tpu tensor is torch's own
// SparseTensorImpl holding tpu index and value tensors, so the generic
// constructors and accessors torch ships serve it once they are registered
// for SparsePrivateUse1; densifying scatters the values on the device.
// What runs: x.to_sparse() (the dense-to-sparse conversion runs where its
// kernel is), moving sparse tensors between the CPU and tpu, their
// indices/values/nnz, and to_dense(). Sparse arithmetic is not lowered.
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/index_put.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_mask_native.h>
#include <torch/library.h>

namespace torch_pjrt::backend {
namespace {

// Scatter-adds the values at their coordinates into zeros on the device
// (duplicates of an uncoalesced tensor add up, as torch defines them).
at::Tensor to_dense(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<bool>) {
  at::ScalarType type = dtype.value_or(self.scalar_type());
  at::Tensor dense = at::zeros(self.sizes(), self.options().layout(at::kStrided).dtype(type));
  if (self._nnz() == 0) return dense;
  at::Tensor indices = self._indices();
  c10::List<std::optional<at::Tensor>> coordinates;
  for (int64_t d = 0; d < self.sparse_dim(); ++d) coordinates.push_back(indices.select(0, d));
  return dense.index_put_(coordinates, self._values().to(type), /*accumulate=*/true);
}

at::Tensor to_sparse(const at::Tensor& self, std::optional<at::Layout> layout, at::OptionalIntArrayRef blocksize,
                     std::optional<int64_t> dense_dim) {
  TORCH_CHECK_NOT_IMPLEMENTED(!layout || *layout == at::kSparse, "torch_pjrt: to_sparse(layout=", *layout,
                              ") is not supported on tpu (sparse COO is)");
  return at::native::dense_to_sparse(self, layout, blocksize, dense_dim);
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", at::native::new_with_dims_and_tensor_sparse_symint);
  m.impl("_indices", at::native::_indices_sparse);
  m.impl("_values", at::native::_values_sparse);
  m.impl("_nnz", at::native::_nnz_sparse);
  m.impl("sparse_dim", at::native::sparse_dim_sparse);
  m.impl("dense_dim", at::native::dense_dim_sparse);
  m.impl("_dimI", at::native::sparse_dim_sparse);
  m.impl("_dimV", at::native::dense_dim_sparse);
  m.impl("is_coalesced", at::native::is_coalesced_sparse);
  m.impl("_coalesced_", at::native::_coalesced_sparse_);
  m.impl("indices", at::native::indices_sparse);
  m.impl("values", at::native::values_sparse);
  m.impl("_to_dense", to_dense);
  m.impl("sparse_mask", at::native::sparse_mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse", to_sparse);
  m.impl("_to_sparse.sparse_dim", static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(
                                      at::native::dense_to_sparse));
}

}  // namespace
}  // namespace torch_pjrt::backend
