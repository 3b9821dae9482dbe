#include "distributed/host_staging.h"

#include <ATen/ATen.h>

namespace torch_pjrt::distributed {

at::Tensor HostStaging::take(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  size_t bytes = c10::elementSize(dtype);
  for (int64_t s : sizes) bytes *= static_cast<size_t>(s);
  at::Tensor raw;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      raw = std::move(it->second);
      free_.erase(it);
      kept_ -= bytes;
    }
  }
  if (!raw.defined()) raw = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  if (bytes == 0) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  return raw.view(dtype).view(sizes);
}

void HostStaging::give_back(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  size_t bytes = tensor.storage().nbytes();
  at::Tensor raw = at::empty({0}, at::kByte).set_(tensor.storage());
  std::lock_guard<std::mutex> lock(mutex_);
  if (kept_ + bytes > limit_) return;
  free_.emplace(bytes, std::move(raw));
  kept_ += bytes;
}

}  // namespace torch_pjrt::distributed
