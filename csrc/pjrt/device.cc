#include "pjrt/device.h"

#include "pjrt/error.h"

namespace torch_pjrt::pjrt {

Device::Device(const PJRT_Api* api, PJRT_Device* device) : api_(api), device_(device) {}

PJRT_DeviceDescription* Device::description() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Device_GetDescription_Args);
  args.device = device_;
  check(api_, api_->PJRT_Device_GetDescription(&args), "PJRT_Device_GetDescription");
  return args.device_description;
}

int Device::id() const {
  auto args = TORCH_PJRT_ARGS(PJRT_DeviceDescription_Id_Args);
  args.device_description = description();
  check(api_, api_->PJRT_DeviceDescription_Id(&args), "PJRT_DeviceDescription_Id");
  return args.id;
}

int Device::local_hardware_id() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Device_LocalHardwareId_Args);
  args.device = device_;
  check(api_, api_->PJRT_Device_LocalHardwareId(&args), "PJRT_Device_LocalHardwareId");
  return args.local_hardware_id;
}

std::string Device::kind() const {
  auto args = TORCH_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args);
  args.device_description = description();
  check(api_, api_->PJRT_DeviceDescription_Kind(&args), "PJRT_DeviceDescription_Kind");
  return std::string(args.device_kind, args.device_kind_size);
}

std::string Device::debug_string() const {
  auto args = TORCH_PJRT_ARGS(PJRT_DeviceDescription_DebugString_Args);
  args.device_description = description();
  check(api_, api_->PJRT_DeviceDescription_DebugString(&args),
        "PJRT_DeviceDescription_DebugString");
  return std::string(args.debug_string, args.debug_string_size);
}

std::vector<NamedValue> Device::attributes() const {
  auto args = TORCH_PJRT_ARGS(PJRT_DeviceDescription_Attributes_Args);
  args.device_description = description();
  check(api_, api_->PJRT_DeviceDescription_Attributes(&args), "PJRT_DeviceDescription_Attributes");
  return copy_named_values(args.attributes, args.num_attributes);
}

std::optional<MemoryStats> Device::memory_stats() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Device_MemoryStats_Args);
  args.device = device_;
  if (PJRT_Error* error = api_->PJRT_Device_MemoryStats(&args)) {
    Error e = take_error(api_, error, "PJRT_Device_MemoryStats");
    if (e.code() == ErrorCode::kUnimplemented) return std::nullopt;
    throw e;
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.num_allocs_is_set) stats.num_allocs = args.num_allocs;
  if (args.largest_alloc_size_is_set) stats.largest_alloc_size = args.largest_alloc_size;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

}  // namespace torch_pjrt::pjrt
