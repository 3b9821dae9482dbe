// A PJRT client: the plugin's view of the devices of this process. Owns the
// PJRT_Client; buffers and executables keep their Client alive through a
// shared_ptr, so the client is destroyed only after the last of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/c_api.h"
#include "pjrt/device.h"
#include "pjrt/named_value.h"
#include "pjrt/plugin.h"
#include "pjrt/timeline.h"

namespace torch_pjrt::pjrt {

struct ClientOptions {
  // Passed to PJRT_Client_Create as they are; plugin-specific.
  std::vector<NamedValue> create_options;

  // The XLA CPU plugin's knob for how many devices it exposes.
  static ClientOptions cpu(int device_count);
};

// Work the runtime did, counted where it happens. Read by metrics().
struct RuntimeCounters {
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> host_to_device_bytes{0};
  std::atomic<int64_t> device_to_host_bytes{0};
  std::atomic<int64_t> device_to_device_bytes{0};
  void reset() {
    executions = 0;
    host_to_device_bytes = 0;
    device_to_host_bytes = 0;
    device_to_device_bytes = 0;
  }
};

class Client : public std::enable_shared_from_this<Client> {
 public:
  static std::shared_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const ClientOptions& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const PJRT_Api* api() const { return plugin_->api(); }
  PJRT_Client* raw() const { return client_; }
  const Plugin& plugin() const { return *plugin_; }

  // "cpu", "cuda", "tpu" as the plugin names its platform.
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  // The devices this process can use, in the plugin's order; torch's device
  // index is the position in this list.
  const std::vector<Device>& devices() const { return devices_; }
  // Throws Error (kOutOfRange) naming the valid range.
  const Device& device(int index) const;

  RuntimeCounters& counters() { return counters_; }
  // Shared so that completion callbacks never own the client.
  const std::shared_ptr<Timeline>& timeline() const { return timeline_; }

 private:
  Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client);
  std::shared_ptr<Plugin> plugin_;
  PJRT_Client* client_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<Device> devices_;
  RuntimeCounters counters_;
  std::shared_ptr<Timeline> timeline_ = std::make_shared<Timeline>();
};

}  // namespace torch_pjrt::pjrt
