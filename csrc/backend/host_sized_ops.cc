// Ops whose result size depends on the data (nonzero, masked_select): the
// data is read on the host to size the result, counted as a host sync in
// metrics()["host_syncs"]; the selection itself runs on the device.
#include <ATen/ops/nonzero.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_put.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/unique_dim.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "eager/execute.h"

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

// unique_consecutive and unique over a dim: sizes depend on the data too.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(
    const at::Tensor& self, bool return_inverse, bool return_counts, std::optional<int64_t> dim) {
  note_host_sync();
  auto [values, inverse, counts] =
      at::unique_consecutive(self.to(at::kCPU), return_inverse, return_counts, dim);
  return {values.to(self.device()), inverse.to(self.device()), counts.to(self.device())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim,
                                                          bool sorted, bool return_inverse,
                                                          bool return_counts) {
  note_host_sync();
  auto [values, inverse, counts] =
      at::unique_dim(self.to(at::kCPU), dim, sorted, return_inverse, return_counts);
  return {values.to(self.device()), inverse.to(self.device()), counts.to(self.device())};
}

// torch.equal: same sizes and every element equal (NaN never is). The
// comparison runs on the device; only its one boolean is read back.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  note_host_sync();
  return at::eq(self, other).all().item<bool>();
}

// masked_scatter_: the i-th true position of mask takes source's i-th
// element; which positions is data, so the mask is read on the host.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "masked_scatter_: expected self and source to have same "
              "dtypes but got ", self.scalar_type(), " and ", source.scalar_type());
  at::Tensor full_mask = mask.expand(self.sizes());
  note_host_sync();
  at::Tensor positions = at::nonzero(full_mask.to(at::kCPU));  // [n, dim]
  int64_t n = positions.size(0);
  TORCH_CHECK(n <= source.numel(), "masked_scatter: expected source to have at least ", n, " elements");
  if (n == 0) return self;
  c10::List<c10::optional<at::Tensor>> indices;
  for (int64_t k = 0; k < self.dim(); ++k) {
    indices.push_back(positions.select(1, k).contiguous().to(self.device()));
  }
  if (self.dim() == 0) return self.copy_(source.reshape({-1})[0]);
  self.index_put_(indices, source.reshape({-1}).narrow(0, 0, n));
  return self;
}

// repeat_interleave(repeats): [0, 0, 1, 2, 2, 2] for repeats [2, 1, 3]; its
// length is the sum of the repeats, read on the host.
at::Tensor repeat_interleave_tensor(const at::Tensor& repeats, c10::optional<int64_t> output_size) {
  note_host_sync();
  return at::repeat_interleave(repeats.to(at::kCPU), output_size).to(repeats.device());
}

// bincount: the result has max(self) + 1 slots, so the range is read on the
// host (one sync for min and max together); the counting is an index_add on
// the device. Result dtypes follow CPU: int64 counts, float32 for float32
// weights, float64 for other weights.
at::Tensor bincount(const at::Tensor& self, const c10::optional<at::Tensor>& weights,
                    int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  bool weighted = weights.has_value() && weights->defined();
  if (weighted) {
    TORCH_CHECK(weights->dim() == 1 && weights->size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
  }
  int64_t length = minlength;
  if (self.numel() > 0) {
    note_host_sync();
    at::Tensor range = at::stack({self.min(), self.max()}).to(at::kCPU).to(at::kLong);
    TORCH_CHECK(range[0].item<int64_t>() >= 0,
                "bincount only supports 1-d non-negative integral inputs.");
    length = std::max(length, range[1].item<int64_t>() + 1);
  }
  at::ScalarType dtype = !weighted ? at::kLong
                         : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor out = at::zeros({length}, self.options().dtype(dtype));
  if (self.numel() == 0) return out;
  at::Tensor values = weighted ? weights->to(dtype) : at::ones({self.size(0)}, out.options());
  return out.index_add_(0, self.to(at::kLong), values);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bincount", bincount);
  m.impl("masked_scatter_", masked_scatter_);
  m.impl("repeat_interleave.Tensor", repeat_interleave_tensor);
  m.impl("_unique2", unique2);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("unique_dim", unique_dim);
  m.impl("equal", equal);
  m.impl("nonzero", nonzero);
  m.impl("masked_select", masked_select);
}

}  // namespace torch_pjrt::backend
