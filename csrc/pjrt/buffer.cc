#include "pjrt/buffer.h"

#include <utility>

#include "pjrt/error.h"

namespace torch_pjrt::pjrt {
namespace {

int64_t element_count_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

PJRT_Client_BufferFromHostBuffer_Args host_buffer_args(const Client& client, const Device& device,
                                                        const void* data, ElementType type,
                                                        const std::vector<int64_t>& dims,
                                                        PJRT_HostBufferSemantics semantics) {
  for (int64_t d : dims) {
    if (d < 0) {
      throw Error("Buffer::from_host", ErrorCode::kInvalidArgument,
                  "negative dimension " + std::to_string(d));
    }
  }
  auto args = TORCH_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args);
  args.client = client.raw();
  args.data = data;
  args.type = to_pjrt(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = semantics;
  args.device = device.raw();
  return args;
}

}  // namespace

Buffer::Buffer(std::shared_ptr<Client> client, PJRT_Buffer* buffer)
    : client_(std::move(client)), buffer_(buffer) {
  if (buffer_ == nullptr) return;  // a deferred buffer: Buffer::deferred sets the shape
  try {
    read_shape();
  } catch (...) {
    reset();
    throw;
  }
}

Buffer::Buffer(Buffer&& other) noexcept
    : client_(std::move(other.client_)),
      buffer_(std::exchange(other.buffer_, nullptr)),
      source_(std::move(other.source_)),
      type_(other.type_),
      dims_(std::move(other.dims_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    client_ = std::move(other.client_);
    buffer_ = std::exchange(other.buffer_, nullptr);
    source_ = std::move(other.source_);
    type_ = other.type_;
    dims_ = std::move(other.dims_);
  }
  return *this;
}

void Buffer::read_shape() {
  const PJRT_Api* api = client_->api();
  auto type_args = TORCH_PJRT_ARGS(PJRT_Buffer_ElementType_Args);
  type_args.buffer = raw();
  check(api, api->PJRT_Buffer_ElementType(&type_args), "PJRT_Buffer_ElementType");
  auto type = from_pjrt(type_args.type);
  if (!type) {
    throw Error("Buffer::element_type", ErrorCode::kUnimplemented,
                "PJRT element type " + std::to_string(int(type_args.type)) +
                    " has no torch-pjrt name");
  }
  type_ = *type;
  auto dims_args = TORCH_PJRT_ARGS(PJRT_Buffer_Dimensions_Args);
  dims_args.buffer = raw();
  check(api, api->PJRT_Buffer_Dimensions(&dims_args), "PJRT_Buffer_Dimensions");
  dims_.assign(dims_args.dims, dims_args.dims + dims_args.num_dims);
}

Buffer::~Buffer() { reset(); }

Buffer Buffer::deferred(std::shared_ptr<Client> client, ElementType type,
                        std::vector<int64_t> dims, std::weak_ptr<DeferredSource> source) {
  Buffer b(std::move(client), nullptr);
  b.type_ = type;
  b.dims_ = std::move(dims);
  b.source_ = std::move(source);
  return b;
}

void Buffer::fulfil(Buffer&& value) const {
  if (buffer_ != nullptr) {
    throw Error("Buffer::fulfil", ErrorCode::kInternal, "the buffer already has contents");
  }
  if (value.type_ != type_ || value.dims_ != dims_) {
    throw Error("Buffer::fulfil", ErrorCode::kInternal,
                "the produced buffer's type or dims differ from the deferred one's");
  }
  buffer_ = std::exchange(value.buffer_, nullptr);
  source_.reset();
}

PJRT_Buffer* Buffer::materialize() const {
  std::shared_ptr<DeferredSource> source = source_.lock();
  if (!source) {
    throw Error("Buffer", ErrorCode::kFailedPrecondition,
                "the buffer has no contents (deleted, donated, or its producer is gone)");
  }
  source->materialize(*this);
  if (buffer_ == nullptr) {
    throw Error("Buffer", ErrorCode::kInternal, "the deferred buffer's producer did not fill it");
  }
  return buffer_;
}

void Buffer::reset() noexcept {
  if (buffer_ == nullptr) return;
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_Destroy_Args);
  args.buffer = raw();
  if (PJRT_Error* error = client_->api()->PJRT_Buffer_Destroy(&args)) {
    take_error(client_->api(), error, "PJRT_Buffer_Destroy");
  }
  buffer_ = nullptr;
}

Buffer Buffer::from_host(const std::shared_ptr<Client>& client, const Device& device,
                         const void* data, ElementType type, const std::vector<int64_t>& dims) {
  auto args = host_buffer_args(*client, device, data, type, dims,
                               PJRT_HostBufferSemantics_kImmutableOnlyDuringCall);
  const PJRT_Api* api = client->api();
  check(api, api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  Event done(api, args.done_with_host_buffer);  // already complete under these semantics
  Buffer buffer(client, args.buffer);
  client->counters().host_to_device_bytes += element_count_of(dims) * byte_width(type);
  return buffer;
}

Buffer Buffer::from_host_async(const std::shared_ptr<Client>& client, const Device& device,
                               const void* data, ElementType type,
                               const std::vector<int64_t>& dims,
                               std::shared_ptr<const void> keep_alive) {
  auto args = host_buffer_args(*client, device, data, type, dims,
                               PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes);
  const PJRT_Api* api = client->api();
  check(api, api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  Buffer buffer(client, args.buffer);
  Event done(api, args.done_with_host_buffer);
  // The host data must live until the plugin says it has read it; the
  // callback owns the last reference. A transfer error is also seen by any
  // reader of the buffer, so it needs no reporting here.
  done.on_ready([owner = std::move(keep_alive)](std::optional<Error>) mutable { owner.reset(); });
  client->counters().host_to_device_bytes += element_count_of(dims) * byte_width(type);
  return buffer;
}

Event Buffer::to_host_async(void* dst, size_t dst_size) const {
  size_t expected = byte_size();
  if (dst_size != expected) {
    throw Error("Buffer::to_host", ErrorCode::kInvalidArgument,
                "destination holds " + std::to_string(dst_size) + " bytes but the buffer has " +
                    std::to_string(expected));
  }
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args);
  args.src = raw();
  args.dst = dst;
  args.dst_size = dst_size;
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  client_->counters().device_to_host_bytes += dst_size;
  return Event(api, args.event);
}

void Buffer::to_host(void* dst, size_t dst_size) const {
  to_host_async(dst, dst_size).await_polling("device-to-host copy", kHostSyncPoll);
}

Event Buffer::copy_raw_to_host_async(void* dst, int64_t offset, int64_t size) const {
  const PJRT_Api* api = client_->api();
  if (api->struct_size < offsetof(PJRT_Api, PJRT_Buffer_CopyRawToHost) + sizeof(void*) ||
      api->PJRT_Buffer_CopyRawToHost == nullptr) {
    throw Error("Buffer::copy_raw_to_host_async", ErrorCode::kUnimplemented,
                "the plugin cannot copy part of a buffer to the host");
  }
  if (offset < 0 || size < 0 || static_cast<size_t>(offset + size) > byte_size()) {
    throw Error("Buffer::copy_raw_to_host_async", ErrorCode::kInvalidArgument,
                "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) +
                    ") are outside the buffer's " + std::to_string(byte_size()));
  }
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_CopyRawToHost_Args);
  args.buffer = raw();
  args.dst = dst;
  args.offset = offset;
  args.transfer_size = size;
  check(api, api->PJRT_Buffer_CopyRawToHost(&args), "PJRT_Buffer_CopyRawToHost");
  client_->counters().device_to_host_bytes += size;
  return Event(api, args.event);
}

Buffer Buffer::copy_to(const Device& device) const {
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_CopyToDevice_Args);
  args.buffer = raw();
  args.dst_device = device.raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_CopyToDevice(&args), "PJRT_Buffer_CopyToDevice");
  client_->counters().device_to_device_bytes += static_cast<int64_t>(byte_size());
  return Buffer(client_, args.dst_buffer);
}

ElementType Buffer::element_type() const { return type_; }

std::vector<int64_t> Buffer::dims() const { return dims_; }

int64_t Buffer::element_count() const { return element_count_of(dims_); }

size_t Buffer::byte_size() const { return element_count() * byte_width(element_type()); }

size_t Buffer::on_device_size() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_OnDeviceSizeInBytes_Args);
  args.buffer = raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_OnDeviceSizeInBytes(&args), "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

Device Buffer::device() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_Device_Args);
  args.buffer = raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_Device(&args), "PJRT_Buffer_Device");
  return Device(api, args.device);
}

Event Buffer::ready_event() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args);
  args.buffer = raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return Event(api, args.event);
}

void Buffer::release_device_memory() {
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_Delete_Args);
  args.buffer = raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_Delete(&args), "PJRT_Buffer_Delete");
}

bool Buffer::is_deleted() const {
  if (buffer_ == nullptr) return source_.expired();  // deferred: not deleted, not produced yet
  auto args = TORCH_PJRT_ARGS(PJRT_Buffer_IsDeleted_Args);
  args.buffer = raw();
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Buffer_IsDeleted(&args), "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

}  // namespace torch_pjrt::pjrt
