#include "backend/storage_resize.h"

#include "backend/device_storage.h"
#include "eager/execute.h"
#include "eager/program_cache.h"

namespace torch_pjrt::backend {

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  DeviceStorage& slot = storage_slot(storage);
  if (nbytes == slot.nbytes) return;
  MemoryCounters& counters = memory_counters(slot.device);
  int64_t delta = static_cast<int64_t>(nbytes) - static_cast<int64_t>(slot.nbytes);
  int64_t now = counters.allocated += delta;
  int64_t peak = counters.peak.load();
  while (now > peak && !counters.peak.compare_exchange_weak(peak, now)) {
  }
  if (slot.buffer) {
    pjrt::ElementType type = slot.buffer->element_type();
    size_t width = pjrt::byte_width(type);
    TORCH_CHECK(nbytes % width == 0, "torch_pjrt: cannot resize a storage of ",
                pjrt::mlir_name(type), " elements to ", nbytes, " bytes");
    int64_t old_n = slot.buffer->element_count();
    int64_t new_n = static_cast<int64_t>(nbytes / width);
    std::vector<int64_t> old_dims = slot.buffer->dims();
    ProgramKey key("torch_pjrt::resize_storage");
    key.dtype(static_cast<int64_t>(type)).shape(c10::IntArrayRef(old_dims)).shape(new_n);
    const Program& program = program_for(key, [&](hlo::Builder& b) {
      hlo::Value flat = b.reshape(b.parameter(hlo::TensorType{type, old_dims}), {old_n});
      hlo::Value out = new_n <= old_n
                           ? b.slice(flat, {0}, {new_n}, {1})
                           : b.pad(flat, b.constant(0, type), {0}, {new_n - old_n}, {0});
      b.set_outputs({out});
    });
    slot.buffer = run_program(program, {slot.buffer}, slot.device)[0];
  }
  slot.nbytes = nbytes;
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

}  // namespace torch_pjrt::backend
