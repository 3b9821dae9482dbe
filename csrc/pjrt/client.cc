#include "pjrt/client.h"

#include "pjrt/error.h"

namespace torch_pjrt::pjrt {

ClientOptions ClientOptions::cpu(int device_count) {
  ClientOptions options;
  options.create_options.push_back({"cpu_device_count", int64_t{device_count}});
  return options;
}

std::shared_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       const ClientOptions& options) {
  const PJRT_Api* api = plugin->api();
  NamedValueArray create_options(options.create_options);
  auto args = TORCH_PJRT_ARGS(PJRT_Client_Create_Args);
  args.create_options = create_options.data();
  args.num_options = create_options.size();
  check(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  return std::shared_ptr<Client>(new Client(std::move(plugin), args.client));
}

Client::Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client)
    : plugin_(std::move(plugin)), client_(client) {
  const PJRT_Api* a = api();
  try {
    auto name = TORCH_PJRT_ARGS(PJRT_Client_PlatformName_Args);
    name.client = client_;
    check(a, a->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
    platform_name_.assign(name.platform_name, name.platform_name_size);

    auto version = TORCH_PJRT_ARGS(PJRT_Client_PlatformVersion_Args);
    version.client = client_;
    check(a, a->PJRT_Client_PlatformVersion(&version), "PJRT_Client_PlatformVersion");
    platform_version_.assign(version.platform_version, version.platform_version_size);

    auto devices = TORCH_PJRT_ARGS(PJRT_Client_AddressableDevices_Args);
    devices.client = client_;
    check(a, a->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
    for (size_t i = 0; i < devices.num_addressable_devices; ++i) {
      devices_.emplace_back(a, devices.addressable_devices[i]);
    }
  } catch (...) {
    auto destroy = TORCH_PJRT_ARGS(PJRT_Client_Destroy_Args);
    destroy.client = client_;
    if (PJRT_Error* error = a->PJRT_Client_Destroy(&destroy)) take_error(a, error, "");
    throw;
  }
}

Client::~Client() {
  auto args = TORCH_PJRT_ARGS(PJRT_Client_Destroy_Args);
  args.client = client_;
  if (PJRT_Error* error = api()->PJRT_Client_Destroy(&args)) {
    take_error(api(), error, "PJRT_Client_Destroy");  // a destructor has no one to tell
  }
}

const Device& Client::device(int index) const {
  if (index < 0 || index >= static_cast<int>(devices_.size())) {
    throw Error("Client::device", ErrorCode::kOutOfRange,
                "device index " + std::to_string(index) + " is out of range: the " +
                    platform_name_ + " plugin exposes " + std::to_string(devices_.size()) +
                    " device(s), indices 0.." + std::to_string(int(devices_.size()) - 1));
  }
  return devices_[index];
}

}  // namespace torch_pjrt::pjrt
