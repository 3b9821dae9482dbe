// Copies between host and device and between devices, and reading one
// element (.item()). Device-to-device copies with a dtype change or a
// broadcast run as a small program; writes into views go through
// write_tensor so aliases see them.
#include <ATen/ops/empty.h>
#include <ATen/ops/_copy_from_and_resize_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/device_storage.h"
#include "eager/device_events.h"
#include "eager/execute.h"
#include "backend/pinned_memory.h"
#include "eager/program_cache.h"
#include "backend/runtime_state.h"
#include "backend/tensor_access.h"
#include "ops/dtypes.h"

namespace torch_pjrt::backend {
namespace {

using pjrt::ElementType;

// Host tensor -> device buffer shaped like the host tensor.
BufferPtr upload(const at::Tensor& host, int device, bool fresh) {
  at::Tensor dense = host.contiguous();
  fresh = fresh || !dense.is_same(host);
  ElementType type = ops::to_element_type(dense.scalar_type());
  std::vector<int64_t> dims(dense.sizes().begin(), dense.sizes().end());
  auto& client = runtime().client();
  const pjrt::Device& target = client->device(device);
  if (fresh) {
    // A temporary nobody else sees: the plugin may read it after we return.
    auto owner = std::make_shared<at::Tensor>(dense);
    auto buffer = std::make_shared<pjrt::Buffer>(
        pjrt::Buffer::from_host_async(client, target, dense.data_ptr(), type, dims, owner));
    track(device, buffer->ready_event());
    return buffer;
  }
  // The caller's own memory: copied before returning, so the caller may
  // change it right after a blocking copy.
  return std::make_shared<pjrt::Buffer>(
      pjrt::Buffer::from_host(client, target, dense.data_ptr(), type, dims));
}

// Device buffer with `src`'s sizes -> the dtype and shape of `dst`, with
// src's lazy conjugate and negative bits applied (x.conj(), x.conj().imag
// are views that only flag the change).
BufferPtr convert_and_broadcast(BufferPtr value, const at::Tensor& src, const at::Tensor& dst) {
  ElementType from = value->element_type();
  ElementType to = ops::to_element_type(dst.scalar_type());
  std::vector<int64_t> src_dims(src.sizes().begin(), src.sizes().end());
  std::vector<int64_t> dst_dims(dst.sizes().begin(), dst.sizes().end());
  std::vector<int64_t> value_dims = value->dims();
  bool conj = src.is_conj() && hlo::is_complex(from), neg = src.is_neg();
  if (from == to && src_dims == dst_dims && !conj && !neg) return value;
  ProgramKey key("aten::_copy_from");
  key.dtype(static_cast<int64_t>(from)).dtype(static_cast<int64_t>(to));
  key.shape(c10::IntArrayRef(value_dims)).shape(src.sizes()).shape(dst.sizes());
  key.attr(uint64_t{conj}).attr(uint64_t{neg});
  const Program& program = program_for(key, [&](hlo::Builder& b) {
    hlo::Value x = b.reshape(b.parameter(hlo::TensorType{from, value_dims}), src_dims);
    if (conj) x = b.complex(b.real(x), b.unary("negate", b.imag(x)));
    if (neg) x = b.unary("negate", x);
    x = b.convert(x, to);
    std::vector<int64_t> mapping;
    for (size_t i = 0; i < src_dims.size(); ++i) {
      mapping.push_back(static_cast<int64_t>(dst_dims.size() - src_dims.size() + i));
    }
    b.set_outputs({b.broadcast_in_dim(x, dst_dims, mapping)});
  });
  return run_program(program, {value}, device_index_of(dst))[0];
}

void check_copy_shapes(const at::Tensor& self, const at::Tensor& dst) {
  // copy_ broadcasts src to dst; torch's error otherwise.
  TORCH_CHECK(self.dim() <= dst.dim(), "output with shape ", dst.sizes(),
              " doesn't match the broadcast shape ", self.sizes());
  for (int64_t i = 0; i < self.dim(); ++i) {
    int64_t s = self.size(self.dim() - 1 - i), d = dst.size(dst.dim() - 1 - i);
    TORCH_CHECK(s == d || s == 1, "The size of tensor a (", d, ") must match the size of tensor b (",
                s, ") at non-singleton dimension ", dst.dim() - 1 - i);
  }
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  check_copy_shapes(self, dst);
  if (dst.is_privateuseone()) {
    BufferPtr value;
    int device = device_index_of(dst);
    if (self.is_privateuseone()) {
      value = read_tensor(self);
      if (device_index_of(self) != device) {
        value = std::make_shared<pjrt::Buffer>(
            value->copy_to(runtime().client()->device(device)));
      }
    } else {
      TORCH_CHECK(self.device().is_cpu(), "torch_pjrt: cannot copy from ", self.device(),
                  " to tpu directly; copy to the CPU first");
      // Convert on the host when the dtype changes: one transfer of the
      // final dtype, and the upload is then of a temporary.
      // Lazy conjugate/negative bits are resolved on the host.
      at::Tensor host = self.resolve_conj().resolve_neg();
      bool fresh = !host.is_same(self);
      if (host.scalar_type() != dst.scalar_type()) {
        host = host.to(dst.scalar_type());
        fresh = true;
      }
      // Uploads of the caller's memory are copied before returning, except
      // non_blocking ones from pinned memory, which the caller promised to
      // leave alone until the device has it (as CUDA asks): they return at
      // once and overlap with running programs.
      bool async = fresh || (non_blocking && host.is_contiguous() &&
                             is_pinned_ptr(host.data_ptr()));
      value = upload(host, device, async);
    }
    value = convert_and_broadcast(std::move(value), self, dst);
    write_tensor(dst, std::move(value));
    return dst;
  }
  TORCH_CHECK(dst.device().is_cpu(), "torch_pjrt: cannot copy from tpu to ", dst.device(),
              " directly; copy to the CPU first");
  // The common case (.cpu(), .numpy(), copy_ into a dense tensor): the
  // device writes straight into dst, with no host temporary.
  bool direct = dst.scalar_type() == self.scalar_type() && dst.sizes() == self.sizes() &&
                dst.is_contiguous() && !dst.is_conj() && !dst.is_neg();
  // Into pinned memory with non_blocking=True, as CUDA does it, the copy is
  // started and the call returns; the caller reads dst after a torch.Event
  // recorded behind it (or synchronize()) says it is done. Failed
  // device-side checks wait for the next host sync, which this is not.
  // Otherwise the copy completes before returning, so the host may read
  // dst right away, and pending checks are raised first.
  bool async = non_blocking && direct && is_pinned_ptr(dst.data_ptr());
  if (!async) {
    raise_failed_checks();
    note_host_sync();
  }
  BufferPtr value = read_tensor(self);
  if (self.is_conj() || self.is_neg()) {
    value = convert_and_broadcast(std::move(value), self, self);
  }
  if (async) {
    // The buffer and dst's memory are held until the copy is done.
    pjrt::Event done = value->to_host_async(dst.data_ptr(), dst.nbytes());
    auto held = std::make_shared<std::pair<BufferPtr, c10::Storage>>(value, dst.storage());
    track(static_cast<int>(self.device().index()), std::move(done), std::move(held));
    return dst;
  }
  if (direct) {
    value->to_host(dst.data_ptr(), dst.nbytes());
    return dst;
  }
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  value->to_host(host.data_ptr(), host.nbytes());
  dst.copy_(host);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  raise_failed_checks();
  note_host_sync();
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  BufferPtr value = read_tensor(self);
  value->to_host(host.data_ptr(), host.nbytes());
  return host.item();
}

}  // namespace

// torch's conjugate and negative fallbacks would resolve a flagged source
// by cloning it, and a clone on this device copies through _copy_from again:
// endless recursion. The copy applies the bits itself (above).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace torch_pjrt::backend
