// A device buffer with one owner. Buffers are immutable once their producer
// (a transfer or an execution) completes; "writing" a tensor means making a
// new buffer. Copies between host and device are asynchronous: each returns
// an Event, and the buffer itself can be used as an input before it is ready.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pjrt/c_api.h"
#include "pjrt/client.h"
#include "pjrt/device.h"
#include "pjrt/element_type.h"
#include "pjrt/event.h"

namespace torch_pjrt::pjrt {

class Buffer;

// What produces deferred buffers (fused eager's pending graph): asked for a
// buffer's contents the first time anything needs its PJRT handle, it runs
// the work and fulfils the buffer before returning, or throws.
class DeferredSource {
 public:
  virtual ~DeferredSource() = default;
  virtual void materialize(const Buffer& buffer) = 0;
};

class Buffer {
 public:
  // Takes ownership of `buffer`, created by `client`.
  Buffer(std::shared_ptr<Client> client, PJRT_Buffer* buffer);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  // A buffer whose contents a later execution will produce: its type and
  // dims are known now, its PJRT handle once `source` has run. Any use of
  // the handle (a copy, an execution input) asks `source` for it first.
  static Buffer deferred(std::shared_ptr<Client> client, ElementType type,
                         std::vector<int64_t> dims, std::weak_ptr<DeferredSource> source);
  // True until a deferred buffer has been fulfilled.
  bool is_deferred() const { return buffer_ == nullptr && !source_.expired(); }
  // Gives a deferred buffer its contents (`value` must have its type and
  // dims). Called by the source; const because holders share the buffer
  // through shared_ptr<const Buffer> as well.
  void fulfil(Buffer&& value) const;

  // Copies dense row-major host data onto `device`. The copy of `data` is
  // taken before this returns, so the host memory may be reused at once.
  static Buffer from_host(const std::shared_ptr<Client>& client, const Device& device,
                          const void* data, ElementType type, const std::vector<int64_t>& dims);

  // Like from_host, but `data` is read after this returns: `keep_alive` owns
  // it and is released (on a plugin thread) once the plugin is done with it.
  static Buffer from_host_async(const std::shared_ptr<Client>& client, const Device& device,
                                const void* data, ElementType type,
                                const std::vector<int64_t>& dims,
                                std::shared_ptr<const void> keep_alive);

  // Starts copying the buffer into `dst` (dense row-major, `dst_size` bytes,
  // which must equal byte_size()). `dst` must stay valid until the returned
  // event completes.
  Event to_host_async(void* dst, size_t dst_size) const;
  // Copies and waits, polling before it blocks (a host sync: Event::await_polling).
  void to_host(void* dst, size_t dst_size) const;
  // Starts copying `size` bytes from byte `offset` of the buffer's on-device
  // representation into `dst`. That is the dense row-major contents only on
  // plugins whose devices use that layout (the CPU plugin); callers check.
  Event copy_raw_to_host_async(void* dst, int64_t offset, int64_t size) const;

  // A copy of this buffer on another device of the same client.
  Buffer copy_to(const Device& device) const;

  // The PJRT handle; materializes a deferred buffer first.
  PJRT_Buffer* raw() const { return buffer_ != nullptr ? buffer_ : materialize(); }
  const std::shared_ptr<Client>& client() const { return client_; }
  ElementType element_type() const;
  std::vector<int64_t> dims() const;
  int64_t element_count() const;
  // Dense size of the logical contents.
  size_t byte_size() const;
  size_t on_device_size() const;
  Device device() const;
  // Completes when the producer of this buffer has finished writing it.
  Event ready_event() const;
  // Frees the device memory now; the handle stays valid but is_deleted().
  void release_device_memory();
  // True after release_device_memory() or after the buffer was donated to
  // an execution.
  bool is_deleted() const;

 private:
  void reset() noexcept;
  void read_shape();
  PJRT_Buffer* materialize() const;
  std::shared_ptr<Client> client_;
  // Mutable only so that a deferred buffer can be fulfilled in place, where
  // every holder sees it; a fulfilled buffer never changes again.
  mutable PJRT_Buffer* buffer_ = nullptr;
  mutable std::weak_ptr<DeferredSource> source_;
  // A buffer's type and dims never change: read once, not on every use
  // (the eager hot path asks for them several times per op).
  ElementType type_ = ElementType::kF32;
  std::vector<int64_t> dims_;
};

}  // namespace torch_pjrt::pjrt
