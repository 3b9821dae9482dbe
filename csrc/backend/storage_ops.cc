// The aten ops that create tpu tensors or change their metadata: empty,
// views, resize_, set_. No data moves here; views share the storage slot.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/device_storage.h"
#include "backend/storage_resize.h"

namespace torch_pjrt::backend {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// Places new storages on the requested device (the allocator uses the
// current one); no index means the current device.
c10::optional<c10::Device> with_index(c10::optional<c10::Device> device) {
  if (device && device->has_index()) return device;
  return c10::nullopt;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout> layout,
                               c10::optional<at::Device> device, c10::optional<bool> pin_memory,
                               c10::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(with_index(device));
  TORCH_CHECK(!layout || *layout == at::kStrided, "torch_pjrt: only strided tensors live on tpu, got ",
              *layout);
  return at::detail::empty_generic(size, device_allocator(), kKeys,
                                   c10::dtype_or_default(dtype),
                                   memory_format.value_or(at::MemoryFormat::Contiguous));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                         c10::optional<at::Device> device, c10::optional<bool> pin_memory) {
  c10::OptionalDeviceGuard guard(with_index(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys,
                                           c10::dtype_or_default(dtype));
}

// Grows the storage when the new shape needs more bytes; keeps contents.
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          c10::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  int64_t storage_offset = impl->storage_offset();
  impl->set_sizes_contiguous(size);
  if (memory_format && *memory_format != at::MemoryFormat::Contiguous &&
      *memory_format != at::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  size_t needed = at::detail::computeStorageNbytes(size, impl->strides(), self.dtype().itemsize(),
                                                   storage_offset);
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1 || source.nbytes() == 0,
              "torch_pjrt: set_ expects a tpu storage, got one on ", source.device());
  at::native::checkSetStorage(self, source, offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  c10::optional<c10::IntArrayRef> strides =
      stride.data() != nullptr ? c10::optional<c10::IntArrayRef>(stride) : c10::nullopt;
  auto* impl = self.unsafeGetTensorImpl();
  if (strides) {
    impl->set_sizes_and_strides(size, *strides);
  } else {
    impl->set_sizes_contiguous(size);
  }
  size_t needed = at::detail::computeStorageNbytes(size, impl->strides(), self.dtype().itemsize(),
                                                   offset);
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_source_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_source_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                                   source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return set_source_storage_offset(self, storage, 0, {0}, {});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

}  // namespace torch_pjrt::backend
