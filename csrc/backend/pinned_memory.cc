#include "backend/pinned_memory.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

namespace torch_pjrt::backend {
namespace {

constexpr size_t kAlignment = 4096;

std::mutex mutex;
std::map<const char*, size_t> blocks;  // start -> bytes

void release(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    blocks.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
      ptr = std::aligned_alloc(kAlignment, rounded);
      TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "torch_pjrt: could not allocate ",
                       nbytes, " bytes of pinned host memory");
      std::lock_guard<std::mutex> lock(mutex);
      blocks.emplace(static_cast<const char*>(ptr), nbytes);
    }
    return {ptr, ptr, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator allocator;
  return &allocator;
}

bool is_pinned_ptr(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p < it->first + std::max<size_t>(it->second, 1);
}

}  // namespace torch_pjrt::backend
