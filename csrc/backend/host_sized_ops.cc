// Ops whose result size depends on the data (nonzero, masked_select): the
// data is read on the host to size the result, counted as a host sync in
// metrics()["host_syncs"]; the selection itself runs on the device.
#include <ATen/ops/nonzero.h>
#include <ATen/ops/index.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "backend/execute.h"

namespace torch_pjrt::backend {
namespace {

at::Tensor nonzero(const at::Tensor& self) {
  note_host_sync();
  return at::nonzero(self.to(at::kCPU)).to(self.device());
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [s, m] = at::expand_outplace(self, mask);
  at::Tensor values = *s, keep = *m;
  if (values.dim() == 0) {  // a 0-d mask selects from a 1-element view
    values = values.reshape({1});
    keep = keep.reshape({1});
  }
  // Bool indices are expanded on the host by the index kernel.
  return at::index(values, {c10::optional<at::Tensor>(keep)});
}

// unique: sorted distinct values (and inverse indices and counts) have a
// data-dependent size; computed on the host from the values, then uploaded.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted,
                                                        bool return_inverse, bool return_counts) {
  note_host_sync();
  auto [values, inverse, counts] =
      at::_unique2(self.to(at::kCPU), sorted, return_inverse, return_counts);
  return {values.to(self.device()), inverse.to(self.device()), counts.to(self.device())};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_unique2", unique2);
  m.impl("nonzero", nonzero);
  m.impl("masked_select", masked_select);
}

}  // namespace torch_pjrt::backend
