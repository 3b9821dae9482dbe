#include "pjrt/pending_buffer.h"

#include <utility>

namespace torch_pjrt::pjrt {
namespace {

bool has(const PJRT_Api* api, size_t offset) {
  return api->struct_size >= offset + sizeof(void*) &&
         *reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api) + offset) != nullptr;
}

#define TORCH_PJRT_HAS(api, fn) has(api, offsetof(PJRT_Api, fn))

}  // namespace

PendingBuffer PendingBuffer::create(const std::shared_ptr<Client>& client, const Device& device,
                                    ElementType type, const std::vector<int64_t>& dims) {
  const PJRT_Api* api = client->api();
  if (!TORCH_PJRT_HAS(api, PJRT_Client_CreateBuffersForAsyncHostToDevice) ||
      !TORCH_PJRT_HAS(api, PJRT_AsyncHostToDeviceTransferManager_TransferData) ||
      !TORCH_PJRT_HAS(api, PJRT_AsyncHostToDeviceTransferManager_SetBufferError) ||
      !TORCH_PJRT_HAS(api, PJRT_Device_DefaultMemory)) {
    throw Error("PendingBuffer::create", ErrorCode::kUnimplemented,
                "the " + client->platform_name() +
                    " plugin cannot create buffers filled later from the host");
  }
  auto memory = TORCH_PJRT_ARGS(PJRT_Device_DefaultMemory_Args);
  memory.device = device.raw();
  check(api, api->PJRT_Device_DefaultMemory(&memory), "PJRT_Device_DefaultMemory");

  auto spec = TORCH_PJRT_ARGS(PJRT_ShapeSpec);
  spec.dims = dims.data();
  spec.num_dims = dims.size();
  spec.element_type = to_pjrt(type);
  auto args = TORCH_PJRT_ARGS(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args);
  args.client = client->raw();
  args.shape_specs = &spec;
  args.num_shape_specs = 1;
  args.memory = memory.memory;
  check(api, api->PJRT_Client_CreateBuffersForAsyncHostToDevice(&args),
        "PJRT_Client_CreateBuffersForAsyncHostToDevice");
  size_t bytes = byte_width(type);
  for (int64_t d : dims) bytes *= static_cast<size_t>(d);
  return PendingBuffer(client, args.transfer_manager, bytes);
}

PendingBuffer::PendingBuffer(std::shared_ptr<Client> client,
                             PJRT_AsyncHostToDeviceTransferManager* manager, size_t byte_size)
    : client_(std::move(client)), manager_(manager), byte_size_(byte_size) {}

PendingBuffer::PendingBuffer(PendingBuffer&& other) noexcept
    : client_(std::move(other.client_)),
      manager_(std::exchange(other.manager_, nullptr)),
      byte_size_(other.byte_size_),
      taken_(other.taken_),
      completed_(other.completed_) {}

PendingBuffer& PendingBuffer::operator=(PendingBuffer&& other) noexcept {
  if (this != &other) {
    destroy();
    client_ = std::move(other.client_);
    manager_ = std::exchange(other.manager_, nullptr);
    byte_size_ = other.byte_size_;
    taken_ = other.taken_;
    completed_ = other.completed_;
  }
  return *this;
}

PendingBuffer::~PendingBuffer() { destroy(); }

void PendingBuffer::destroy() noexcept {
  if (manager_ == nullptr) return;
  if (!completed_) {
    try {
      fail(ErrorCode::kAborted, "the transfer that was to fill this buffer was abandoned");
    } catch (...) {
      // Nothing more can be done from a destructor.
    }
  }
  const PJRT_Api* api = client_->api();
  auto args = TORCH_PJRT_ARGS(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args);
  args.transfer_manager = manager_;
  if (PJRT_Error* error = api->PJRT_AsyncHostToDeviceTransferManager_Destroy(&args)) {
    take_error(api, error, "");
  }
  manager_ = nullptr;
}

Buffer PendingBuffer::take_buffer() {
  if (taken_ || manager_ == nullptr) {
    throw Error("PendingBuffer::take_buffer", ErrorCode::kFailedPrecondition,
                "the buffer was already taken");
  }
  const PJRT_Api* api = client_->api();
  auto args = TORCH_PJRT_ARGS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args);
  args.transfer_manager = manager_;
  args.buffer_index = 0;
  check(api, api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&args),
        "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer");
  taken_ = true;
  return Buffer(client_, args.buffer_out);
}

Event PendingBuffer::fill(const void* data, size_t size) {
  if (size != byte_size_) {
    throw Error("PendingBuffer::fill", ErrorCode::kInvalidArgument,
                "the buffer holds " + std::to_string(byte_size_) + " bytes, got " +
                    std::to_string(size));
  }
  return fill_part(data, 0, static_cast<int64_t>(size), /*last=*/true);
}

Event PendingBuffer::fill_part(const void* data, int64_t offset, int64_t size, bool last) {
  if (completed_ || manager_ == nullptr) {
    throw Error("PendingBuffer::fill", ErrorCode::kFailedPrecondition,
                "the buffer was already completed");
  }
  if (offset < 0 || size < 0 || static_cast<size_t>(offset + size) > byte_size_) {
    throw Error("PendingBuffer::fill", ErrorCode::kInvalidArgument,
                "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) +
                    ") are outside the buffer's " + std::to_string(byte_size_));
  }
  const PJRT_Api* api = client_->api();
  auto args = TORCH_PJRT_ARGS(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args);
  args.transfer_manager = manager_;
  args.buffer_index = 0;
  args.data = data;
  args.offset = offset;
  args.transfer_size = size;
  args.is_last_transfer = last;
  check(api, api->PJRT_AsyncHostToDeviceTransferManager_TransferData(&args),
        "PJRT_AsyncHostToDeviceTransferManager_TransferData");
  if (last) completed_ = true;
  client_->counters().host_to_device_bytes += size;
  return Event(api, args.done_with_h2d_transfer);
}

void PendingBuffer::fail(ErrorCode code, const std::string& message) {
  if (completed_ || manager_ == nullptr) return;
  const PJRT_Api* api = client_->api();
  auto args = TORCH_PJRT_ARGS(PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args);
  args.transfer_manager = manager_;
  args.buffer_index = 0;
  args.error_code = static_cast<PJRT_Error_Code>(code);
  args.error_message = message.data();
  args.error_message_size = message.size();
  completed_ = true;
  check(api, api->PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&args),
        "PJRT_AsyncHostToDeviceTransferManager_SetBufferError");
}

}  // namespace torch_pjrt::pjrt
