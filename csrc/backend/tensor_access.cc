#include "backend/tensor_access.h"

#include <algorithm>

#include <ATen/Functions.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>

#include <numeric>

#include "ops/dtypes.h"
#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "backend/strided_box.h"
#include "eager/pending_graph.h"

namespace torch_pjrt::backend {

using ops::to_element_type;
using ops::to_scalar_type;
namespace {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;
using pjrt::ElementType;

int64_t numel_of(c10::IntArrayRef sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
}

bool is_contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// Element count the storage holds in units of `type`.
int64_t storage_elements(const DeviceStorage& slot, ElementType type) {
  return static_cast<int64_t>(slot.nbytes / pjrt::byte_width(type));
}

// The slot's buffer viewed as `type`, materialising zeros for a storage that
// was never written (torch.empty), so later reads agree with this one.
BufferPtr storage_buffer(DeviceStorage& slot, ElementType type) {
  if (slot.buffer) return slot.buffer;
  int64_t n = storage_elements(slot, type);
  ProgramKey key("torch_pjrt::zeros");
  key.dtype(static_cast<int64_t>(type)).shape(n);
  const Program& program = program_for(key, [&](Builder& b) {
    b.set_outputs({b.zeros(TensorType{type, {n}})});
  });
  slot.buffer = run_program(program, {}, slot.device)[0];
  return slot.buffer;
}

// Flat element indices of a strided view: offset + sum(iota_k * stride_k).
Value view_indices(Builder& b, c10::IntArrayRef sizes, c10::IntArrayRef strides, Value offset) {
  std::vector<int64_t> dims(sizes.begin(), sizes.end());
  TensorType index_type{ElementType::kS64, dims};
  Value idx = b.splat(offset, dims);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1 || strides[k] == 0) continue;
    Value term = b.binary("multiply", b.iota(index_type, static_cast<int64_t>(k)),
                          b.splat(b.constant_int(strides[k], ElementType::kS64), dims));
    idx = b.binary("add", idx, term);
  }
  dims.push_back(1);
  return b.reshape(idx, dims);
}

void add_view_to_key(ProgramKey& key, const at::Tensor& t, ElementType storage_type,
                     int64_t storage_n) {
  key.dtype(static_cast<int64_t>(storage_type)).dtype(static_cast<int64_t>(t.scalar_type()));
  key.shape(storage_n).shape(t.sizes()).shape(t.strides());
  key.attr(is_contiguous(t.sizes(), t.strides()));
}

// The storage's flat contents (`n` elements of `have`) as elements of
// `want`: the same bytes, reinterpreted, as torch views a storage.
Value reinterpret_flat(Builder& b, Value flat, int64_t n, ElementType have, ElementType want) {
  // XLA does not bitcast between real and complex: a complex number is its
  // two parts side by side, so go through the part type.
  if (hlo::is_complex(want) != hlo::is_complex(have) ||
      (hlo::is_complex(want) && have != want)) {
    if (hlo::is_complex(have)) {
      ElementType part = hlo::complex_part(have);
      Value re = b.reshape(b.real(flat), {n, 1}), im = b.reshape(b.imag(flat), {n, 1});
      Value parts = b.reshape(b.concatenate({re, im}, 1), {2 * n});
      return reinterpret_flat(b, parts, 2 * n, part, want);
    }
    ElementType part = hlo::complex_part(want);
    int64_t m = n * static_cast<int64_t>(pjrt::byte_width(have)) /
                static_cast<int64_t>(pjrt::byte_width(part));
    Value parts = b.reshape(reinterpret_flat(b, flat, n, have, part), {m / 2, 2});
    Value re = b.reshape(b.slice(parts, {0, 0}, {m / 2, 1}, {1, 1}), {m / 2});
    Value im = b.reshape(b.slice(parts, {0, 1}, {m / 2, 2}, {1, 1}), {m / 2});
    return b.complex(re, im);
  }
  // XLA's bool is a 1-bit type to bitcast_convert, torch's a byte: go
  // through uint8 (a nonzero byte read as bool is true).
  if (have == ElementType::kPred && want != ElementType::kPred) {
    return reinterpret_flat(b, b.convert(flat, ElementType::kU8), n, ElementType::kU8, want);
  }
  if (want == ElementType::kPred && have != ElementType::kPred) {
    Value bytes = reinterpret_flat(b, flat, n, have, ElementType::kU8);
    return b.compare(bytes, b.zeros(b.type(bytes)), hlo::Compare::kNe);
  }
  size_t hw = pjrt::byte_width(have), ww = pjrt::byte_width(want);
  if (hw == ww) return b.bitcast_convert(flat, want);
  if (hw > ww) {
    int64_t ratio = static_cast<int64_t>(hw / ww);
    return b.reshape(b.bitcast_convert(flat, want), {n * ratio});
  }
  int64_t ratio = static_cast<int64_t>(ww / hw);
  return b.bitcast_convert(b.reshape(flat, {n / ratio, ratio}), want);
}

// Elements of `want` the storage's buffer holds.
int64_t elements_as(int64_t n, ElementType have, ElementType want) {
  return n * static_cast<int64_t>(pjrt::byte_width(have)) /
         static_cast<int64_t>(pjrt::byte_width(want));
}

}  // namespace

hlo::TensorType tensor_type(const at::Tensor& t) {
  return TensorType{to_element_type(t.scalar_type()), std::vector<int64_t>(t.sizes().begin(),
                                                                           t.sizes().end())};
}

int device_index_of(const at::Tensor& t) { return t.device().index(); }

bool is_whole_buffer(const at::Tensor& t) {
  DeviceStorage& slot = storage_slot(t.storage());
  if (!slot.buffer || t.storage_offset() != 0) return false;
  if (slot.buffer->element_type() != to_element_type(t.scalar_type())) return false;
  return t.numel() == slot.buffer->element_count() && is_contiguous(t.sizes(), t.strides());
}

std::optional<PermutedView> whole_buffer_permutation(const at::Tensor& t) {
  DeviceStorage& slot = storage_slot(t.storage());
  if (!slot.buffer || t.storage_offset() != 0 || t.dim() < 2) return std::nullopt;
  if (slot.buffer->element_type() != to_element_type(t.scalar_type())) return std::nullopt;
  if (t.numel() != slot.buffer->element_count()) return std::nullopt;
  // Dims ordered by decreasing stride must form a contiguous layout.
  std::vector<int64_t> order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  // In order already: a plain read (buffer_for_read), not a view. Taking it
  // as a permutation kept in-place ops on 2-D and larger tensors from
  // donating their buffer.
  if (std::is_sorted(order.begin(), order.end())) return std::nullopt;
  int64_t expected = 1;
  for (int64_t k = t.dim() - 1; k >= 0; --k) {
    int64_t d = order[k];
    if (t.size(d) != 1 && t.stride(d) != expected) return std::nullopt;
    expected *= t.size(d);
  }
  PermutedView view;
  view.permutation.resize(t.dim());
  for (int64_t k = 0; k < t.dim(); ++k) {
    view.contiguous_sizes.push_back(t.size(order[k]));
    view.permutation[order[k]] = k;
  }
  return view;
}

void storage_buffer_for(const at::Tensor& t) {
  storage_buffer(storage_slot(t.storage()), to_element_type(t.scalar_type()));
}

BufferPtr buffer_for_read(const at::Tensor& t) {
  DeviceStorage& slot = storage_slot(t.storage());
  storage_buffer(slot, to_element_type(t.scalar_type()));
  if (is_whole_buffer(t)) return slot.buffer;
  return read_tensor(t);
}

namespace {

// Reading a view out of a value a pending graph will produce, or writing
// one into it. In strict mode only compiled graphs' results are pending;
// the copy joins their graph instead of running it now: a decode loop that
// passes `token[:, None]` to the next compiled call would otherwise end the
// pending graph at every token, and wait for it.
BufferPtr run_view_program(const Program& program, const std::vector<BufferPtr>& inputs,
                           int device, const std::vector<bool>& may_donate = {}) {
  if (settings().eager == EagerMode::kStrict &&
      std::any_of(inputs.begin(), inputs.end(),
                  [](const BufferPtr& b) { return b->is_deferred(); })) {
    // The pending graph donates the old contents when only it holds them.
    return eager::record(program, inputs, device)[0];
  }
  return run_program(program, inputs, device, may_donate)[0];
}

}  // namespace

BufferPtr read_tensor(const at::Tensor& t) {
  DeviceStorage& slot = storage_slot(t.storage());
  ElementType want = to_element_type(t.scalar_type());
  BufferPtr base = storage_buffer(slot, want);
  ElementType have = base->element_type();
  std::vector<int64_t> base_dims = base->dims();
  int64_t n = base->element_count();
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  if (have == want && base_dims == sizes && t.storage_offset() == 0 &&
      is_contiguous(t.sizes(), t.strides())) {
    return base;
  }
  int64_t n_want = elements_as(n, have, want);
  TORCH_CHECK(t.numel() == 0 ||
                  t.storage_offset() + 1 +
                          [&] {
                            int64_t extent = 0;
                            for (int64_t k = 0; k < t.dim(); ++k) {
                              extent += (t.size(k) - 1) * t.stride(k);
                            }
                            return extent;
                          }() <=
                      n_want,
              "torch_pjrt: view of size ", t.sizes(), " and strides ", t.strides(),
              " at offset ", t.storage_offset(), " reaches past its storage of ", n_want,
              " elements");

  ProgramKey key("torch_pjrt::view_read");
  add_view_to_key(key, t, have, n);
  key.shape(c10::IntArrayRef(base_dims));
  bool contiguous = is_contiguous(t.sizes(), t.strides());
  const Program& program = program_for(key, [&](Builder& b) {
    Value src = b.parameter(TensorType{have, base_dims});
    Value offset = b.parameter(TensorType{ElementType::kS64, {}});
    Value flat = reinterpret_flat(b, b.reshape(src, {n}), n, have, want);
    Value out;
    if (t.numel() == 0) {
      out = b.zeros(TensorType{want, sizes});
    } else if (contiguous) {
      out = b.reshape(b.dynamic_slice(flat, {offset}, {t.numel()}), sizes);
    } else if (auto box = strided_box(t.sizes(), t.strides())) {
      out = read_box(b, flat, offset, *box, t.sizes());
    } else {
      Value idx = view_indices(b, t.sizes(), t.strides(), offset);
      hlo::Builder::GatherDims g{{}, {0}, {0}, static_cast<int64_t>(sizes.size())};
      out = b.gather(flat, idx, g, {1}, sizes);
    }
    b.set_outputs({out});
  });
  BufferPtr offset = scalar_buffer_int(slot.device, ElementType::kS64, t.storage_offset());
  return run_view_program(program, {base, offset}, slot.device);
}

void write_tensor(const at::Tensor& t, BufferPtr value) {
  DeviceStorage& slot = storage_slot(t.storage());
  ElementType type = to_element_type(t.scalar_type());
  TORCH_INTERNAL_ASSERT(value->element_type() == type, "torch_pjrt: writing ",
                        pjrt::mlir_name(value->element_type()), " into a ", t.scalar_type(),
                        " tensor");
  int64_t n = storage_elements(slot, type);
  bool whole = t.storage_offset() == 0 && t.numel() == n && is_contiguous(t.sizes(), t.strides());
  if (whole) {
    slot.buffer = std::move(value);
    return;
  }
  if (t.numel() == 0) return;
  BufferPtr base = storage_buffer(slot, type);
  ElementType have = base->element_type();
  std::vector<int64_t> base_dims = base->dims();
  std::vector<int64_t> value_dims = value->dims();
  bool contiguous = is_contiguous(t.sizes(), t.strides());

  ProgramKey key("torch_pjrt::view_write");
  add_view_to_key(key, t, have, base->element_count());
  key.shape(c10::IntArrayRef(base_dims)).shape(c10::IntArrayRef(value_dims));
  const Program& program = program_for(key, [&](Builder& b) {
    Value src = b.parameter(TensorType{have, base_dims}, /*donate=*/true);
    Value update = b.parameter(TensorType{type, value_dims});
    Value offset = b.parameter(TensorType{ElementType::kS64, {}});
    int64_t total = TensorType{have, base_dims}.numel();
    int64_t total_as_type = elements_as(total, have, type);
    // Updated in the written tensor's dtype, then reinterpreted back.
    Value flat = reinterpret_flat(b, b.reshape(src, {total}), total, have, type);
    Value values = update;
    Value result;
    auto box = contiguous ? std::nullopt : strided_box(t.sizes(), t.strides());
    if (contiguous) {
      result = b.dynamic_update_slice(flat, b.reshape(values, {t.numel()}), {offset});
    } else if (box && !box->expanded) {
      result = write_box(b, flat, offset, *box, values);
    } else {
      std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
      Value idx = view_indices(b, t.sizes(), t.strides(), offset);
      hlo::Builder::ScatterDims s{{}, {0}, {0}, static_cast<int64_t>(sizes.size())};
      result = b.scatter(flat, idx, b.reshape(values, sizes), s,
                         [](Builder& r, const std::vector<Value>& a) {
                           return std::vector<Value>{a[1]};
                         });
    }
    result = reinterpret_flat(b, result, total_as_type, type, have);
    b.set_outputs({b.reshape(result, base_dims)});
  });
  BufferPtr offset = scalar_buffer_int(slot.device, ElementType::kS64, t.storage_offset());
  // The old contents can be donated when only the slot holds them: `base`
  // and the slot are the two references.
  bool unique = base.use_count() == 2;
  slot.buffer = run_view_program(program, {base, value, offset}, slot.device, {unique, false, false});
}

at::Tensor wrap_buffer(BufferPtr buffer, c10::ScalarType dtype, c10::IntArrayRef sizes,
                       int device) {
  // The allocator places the slot on the current device.
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1,
                                     static_cast<c10::DeviceIndex>(device)));
  at::Tensor out = at::detail::empty_generic(sizes, device_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                             dtype, c10::MemoryFormat::Contiguous);
  storage_slot(out.storage()).buffer = std::move(buffer);
  return out;
}

}  // namespace torch_pjrt::backend
