// Reading and writing tpu tensors, views included. A tensor is (storage
// slot, sizes, strides, offset, dtype); its contents are computed from the
// slot's buffer by a small cached view program when they are not the whole
// buffer, and writes through a view rebuild the whole storage contents
// (dynamic_update_slice or scatter) and swap the slot's buffer.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "backend/device_storage.h"
#include "eager/execute.h"
#include "hlo/types.h"

namespace torch_pjrt::backend {

hlo::TensorType tensor_type(const at::Tensor& t);

// True when `t` is exactly its storage's buffer: same dtype, contiguous,
// offset 0, all elements. Such a tensor is passed to programs as it is.
bool is_whole_buffer(const at::Tensor& t);

// When `t` is a permutation (transpose, permute) of its storage's whole
// buffer, the layout to read it in-program without a view program:
// reshape the buffer to `contiguous_sizes`, then transpose by `permutation`.
struct PermutedView {
  std::vector<int64_t> contiguous_sizes;
  std::vector<int64_t> permutation;
};
std::optional<PermutedView> whole_buffer_permutation(const at::Tensor& t);

// Makes sure `t`'s storage has a buffer (zeros for a never-written one).
void storage_buffer_for(const at::Tensor& t);

// The contents of `t` as a buffer whose dims are `t.sizes()` or, for a whole
// buffer, the buffer's own dims (same elements, row-major).
BufferPtr buffer_for_read(const at::Tensor& t);

// The contents of `t` as a buffer with exactly `t.sizes()`.
BufferPtr read_tensor(const at::Tensor& t);

// Stores `value` (dims of t.sizes() or the same element count, dtype of t)
// as the contents of `t`, updating its storage so every alias sees it.
void write_tensor(const at::Tensor& t, BufferPtr value);

// A new tpu tensor on `device` owning `buffer` (row-major contents).
at::Tensor wrap_buffer(BufferPtr buffer, c10::ScalarType dtype, c10::IntArrayRef sizes,
                       int device);

int device_index_of(const at::Tensor& t);

}  // namespace torch_pjrt::backend
