// A device buffer whose contents arrive later from the host. The buffer can
// be handed to executions at once (they wait for it, as they wait for any
// producer), and is completed from any thread by fill(), or by fail(), after
// which every execution that reads it fails with that error. This is how a
// result computed off the device (a collective over the host network) takes
// its place in the device's order of work without the caller waiting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/client.h"
#include "pjrt/device.h"
#include "pjrt/element_type.h"
#include "pjrt/error.h"
#include "pjrt/event.h"

namespace torch_pjrt::pjrt {

class PendingBuffer {
 public:
  // Throws Error (kUnimplemented) when the plugin cannot create buffers for
  // later transfers.
  static PendingBuffer create(const std::shared_ptr<Client>& client, const Device& device,
                              ElementType type, const std::vector<int64_t>& dims);
  PendingBuffer(PendingBuffer&& other) noexcept;
  PendingBuffer& operator=(PendingBuffer&& other) noexcept;
  PendingBuffer(const PendingBuffer&) = delete;
  PendingBuffer& operator=(const PendingBuffer&) = delete;
  // Fails a buffer that was neither filled nor failed, so that nothing
  // waiting for it waits forever.
  ~PendingBuffer();

  // The buffer, not yet ready. Taken once: the caller owns it.
  Buffer take_buffer();
  size_t byte_size() const { return byte_size_; }

  // Copies `size` bytes (the whole buffer, dense row-major) from `data`,
  // which must stay valid until the returned event completes.
  Event fill(const void* data, size_t size);
  // Copies `size` bytes to byte `offset` of the buffer's dense row-major
  // contents; the part with `last` set must come after all others and
  // completes the buffer. For plugins whose device layout is the dense
  // row-major one (the CPU plugin); `data` must stay valid until the event.
  Event fill_part(const void* data, int64_t offset, int64_t size, bool last);
  // Completes the buffer with an error instead.
  void fail(ErrorCode code, const std::string& message);
  bool completed() const { return completed_; }

 private:
  PendingBuffer(std::shared_ptr<Client> client, PJRT_AsyncHostToDeviceTransferManager* manager,
                size_t byte_size);
  void destroy() noexcept;
  std::shared_ptr<Client> client_;
  PJRT_AsyncHostToDeviceTransferManager* manager_ = nullptr;
  size_t byte_size_ = 0;
  bool taken_ = false;
  bool completed_ = false;
};

}  // namespace torch_pjrt::pjrt
