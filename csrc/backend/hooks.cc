// PrivateUse1 hooks: how PyTorch asks the backend for generators, device
// counts, pointers' devices and storage resizing.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>

#include "backend/device_storage.h"
#include "backend/generator.h"
#include "backend/pinned_memory.h"
#include "backend/runtime_state.h"
#include "backend/storage_resize.h"

namespace torch_pjrt::backend {
namespace {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return runtime_initialized() && deviceCount() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return make_generator(device);
  }
  // Data pointers are slot addresses; the slot knows its device.
  at::Device getDeviceFromPtr(void* data) const override {
    auto* slot = static_cast<DeviceStorage*>(data);
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(slot->device));
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return runtime_initialized() && device >= 0 && device < deviceCount();
  }
  c10::DeviceIndex deviceCount() const override {
    if (!runtime_initialized()) return 0;
    return static_cast<c10::DeviceIndex>(runtime().client()->devices().size());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
        ->setDevice(c10::Device(c10::DeviceType::PrivateUse1, device));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = getCurrentDevice();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

}  // namespace

void register_hooks() {
  static Hooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace torch_pjrt::backend
