// A device of a Client. Devices belong to their client (PJRT frees them with
// it), so a Device is a non-owning handle that must not outlive the Client.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pjrt/c_api.h"
#include "pjrt/named_value.h"

namespace torch_pjrt::pjrt {

// What PJRT_Device_MemoryStats reports; fields a plugin leaves unset are empty.
struct MemoryStats {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> num_allocs;
  std::optional<int64_t> largest_alloc_size;
  std::optional<int64_t> bytes_limit;
};

class Device {
 public:
  Device(const PJRT_Api* api, PJRT_Device* device);

  PJRT_Device* raw() const { return device_; }
  // Global id, unique across processes.
  int id() const;
  int local_hardware_id() const;
  // "cpu", "TPU v5 lite", "NVIDIA H200" ...
  std::string kind() const;
  std::string debug_string() const;
  std::vector<NamedValue> attributes() const;
  // Empty when the plugin does not report memory statistics (the CPU plugin).
  std::optional<MemoryStats> memory_stats() const;

  bool operator==(const Device& other) const { return device_ == other.device_; }

 private:
  PJRT_DeviceDescription* description() const;
  const PJRT_Api* api_;
  PJRT_Device* device_;
};

}  // namespace torch_pjrt::pjrt
