// What a tpu storage's DataPtr points at: a slot holding the storage's
// current contents as an immutable PJRT buffer. The data pointer is the
// slot's address, unique and never dereferenced. Writes replace the buffer;
// every tensor viewing the storage shares the slot, so all of them see it.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "pjrt/buffer.h"

namespace torch_pjrt::backend {

struct DeviceStorage {
  int device = 0;
  size_t nbytes = 0;
  // The contents; null until first written (an empty() tensor), read as zeros.
  // Its dims are whatever the writer produced; only its bytes matter.
  std::shared_ptr<pjrt::Buffer> buffer;
};

// The allocator behind tpu storages: hands out slots, tracks bytes per device.
c10::Allocator* device_allocator();

// The slot of a tpu storage. Throws when the storage is not ours.
DeviceStorage& storage_slot(const c10::Storage& storage);

struct MemoryCounters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};
constexpr int kMaxDevices = 64;
MemoryCounters& memory_counters(int device);

}  // namespace torch_pjrt::backend
