// The device guard for tpu: the current device is per thread, as for CUDA.
// Streams: PJRT orders a device's work by data dependencies, not by the
// stream it was launched on, so every stream of a device stands for that
// one ordering. New streams (torch.Stream(device="tpu"), side streams in
// prefetching and sharding code) are distinct ids for the current-stream
// bookkeeping; querying or synchronizing any of them covers all work
// launched on the device, never less than the stream's own.
#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <memory>

#include "eager/device_events.h"
#include "eager/execute.h"
#include "eager/pending_graph.h"
#include "backend/runtime_state.h"

namespace torch_pjrt::backend {
namespace {

thread_local c10::DeviceIndex current_device = 0;

// The current stream id per device index (0: the default stream), per
// thread as torch's current stream is.
constexpr int kMaxDevices = 64;
thread_local c10::StreamId current_stream_id[kMaxDevices] = {};
std::atomic<c10::StreamId> next_stream_id{1};

c10::StreamId& current_stream_of(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torch_pjrt: device index ",
              static_cast<int>(device), " has no stream slot");
  return current_stream_id[device];
}

// What a recorded torch.Event holds: the device and the mark of the work
// launched on it so far (device_events.h).
struct RecordedWork {
  int device = 0;
  uint64_t mark = 0;
};

struct DeviceGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, current_device);
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "torch_pjrt: expected a tpu device, got ",
                d);
    if (d.index() < 0) return;  // "tpu" without an index keeps the current one
    c10::DeviceIndex count = deviceCount();
    TORCH_CHECK(d.index() < count, "torch_pjrt: device index ", static_cast<int>(d.index()),
                      " is out of range; ", static_cast<int>(count), " device(s) are available");
    current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) current_device = d.index();
  }
  static c10::Device resolved(c10::Device d) {
    return d.index() >= 0 ? d : c10::Device(c10::DeviceType::PrivateUse1, current_device);
  }
  c10::Stream getStream(c10::Device d) const override {
    d = resolved(d);
    return c10::Stream(c10::Stream::UNSAFE, d, current_stream_of(d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, resolved(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, resolved(d), next_stream_id.fetch_add(1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Device d = resolved(s.device());
    c10::StreamId& slot = current_stream_of(d.index());
    c10::Stream old(c10::Stream::UNSAFE, d, slot);
    slot = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    if (!runtime_initialized()) return 0;
    return static_cast<c10::DeviceIndex>(runtime().client()->devices().size());
  }
  // A torch.Event stands for the work launched on its device before it was
  // recorded (fused eager's pending ops are launched first): query() asks
  // whether that work is done, synchronize() waits for it and not for work
  // launched after. Work is ordered by data dependencies inside PJRT, so
  // block() (a stream waiting on an event) has nothing to add.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    c10::DeviceIndex device = device_index >= 0 ? device_index : stream.device_index();
    if (device < 0) device = current_device;
    eager::flush(device, "event record");
    auto* mark = static_cast<RecordedWork*>(*event);
    if (mark == nullptr) {
      *event = mark = std::make_unique<RecordedWork>().release();  // destroyEvent deletes it
    }
    mark->device = device;
    mark->mark = work_mark(device);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    auto* mark = static_cast<const RecordedWork*>(event);
    return mark == nullptr || work_done(mark->device, mark->mark);
  }
  void synchronizeEvent(void* event) const override {
    auto* mark = static_cast<const RecordedWork*>(event);
    if (mark != nullptr) wait_for_work(mark->device, mark->mark, "torch.Event.synchronize");
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    std::unique_ptr<RecordedWork> owned(static_cast<RecordedWork*>(event));
  }
  // Done when everything launched on the device so far is (fused eager's
  // pending ops launched first).
  bool queryStream(const c10::Stream& s) const override {
    c10::DeviceIndex device = s.device_index() >= 0 ? s.device_index() : current_device;
    eager::flush(device, "stream query");
    return work_done(device, work_mark(device));
  }
  void synchronizeStream(const c10::Stream& s) const override { synchronize(s.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex d) const override { synchronize(d); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl);

// Tensor.record_stream(s): CUDA's allocator must not reuse a block that a
// side stream still reads. A PJRT buffer is freed only after the executions
// that read it are done, whichever stream launched them: nothing to record.
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == c10::DeviceType::PrivateUse1 && self.is_privateuseone(),
              "record_stream: expected a tpu tensor and a tpu stream, got a tensor on ",
              self.device(), " and a stream on ", s.device());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace
}  // namespace torch_pjrt::backend
