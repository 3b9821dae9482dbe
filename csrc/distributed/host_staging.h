// Host memory the host transport copies tensors through, kept for reuse: a
// fresh 16 MiB tensor per call costs thousands of page faults, which at
// large sizes took more time than the copies themselves.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace torch_pjrt::distributed {

class HostStaging {
 public:
  // Keeps at most `limit` bytes of unused buffers.
  explicit HostStaging(size_t limit = size_t{512} << 20) : limit_(limit) {}

  // A contiguous CPU tensor of `sizes` and `dtype`, the caller's alone until
  // it is given back. Its storage is a whole pooled buffer.
  at::Tensor take(c10::IntArrayRef sizes, c10::ScalarType dtype);
  // Returns a tensor from take() once nothing reads or writes it any more.
  void give_back(const at::Tensor& tensor);

 private:
  std::mutex mutex_;
  std::multimap<size_t, at::Tensor> free_;  // raw byte buffers by size
  size_t limit_;
  size_t kept_ = 0;
};

}  // namespace torch_pjrt::distributed
