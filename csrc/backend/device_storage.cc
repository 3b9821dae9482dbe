#include "backend/device_storage.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "backend/runtime_state.h"

namespace torch_pjrt::backend {
namespace {

MemoryCounters counters[kMaxDevices];

void count(int device, int64_t bytes) {
  MemoryCounters& c = counters[device];
  int64_t now = c.allocated += bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

void delete_slot(void* ptr) {
  auto* slot = static_cast<DeviceStorage*>(ptr);
  count(slot->device, -static_cast<int64_t>(slot->nbytes));
  delete slot;
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
                                  ->getDevice()
                                  .index();
    auto* slot = new DeviceStorage{device, nbytes, nullptr};
    count(device, static_cast<int64_t>(nbytes));
    counters[device].allocations++;
    return {slot, slot, &delete_slot, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "torch_pjrt: device storages cannot be copied as raw memory");
  }
};

DeviceAllocator allocator;

}  // namespace

c10::Allocator* device_allocator() { return &allocator; }

DeviceStorage& storage_slot(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  TORCH_CHECK(ptr.device().type() == c10::DeviceType::PrivateUse1,
              "torch_pjrt: expected a device storage, got one on ", ptr.device());
  TORCH_CHECK(ptr.get_deleter() == &delete_slot || ptr.get() == nullptr,
              "torch_pjrt: this storage was not allocated by torch_pjrt");
  TORCH_CHECK(ptr.get() != nullptr, "torch_pjrt: the storage has no data (was it freed?)");
  return *static_cast<DeviceStorage*>(ptr.get_context());
}

MemoryCounters& memory_counters(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torch_pjrt: device index ", device,
              " out of range");
  return counters[device];
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

}  // namespace torch_pjrt::backend
