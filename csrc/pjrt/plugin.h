// A loaded PJRT plugin: the shared library, its PJRT_Api table and what it
// says about itself. Owns nothing a caller can free; see Plugin::load.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pjrt/c_api.h"
#include "pjrt/named_value.h"

namespace torch_pjrt::pjrt {

struct ApiVersion {
  int major = 0;
  int minor = 0;
};

class Plugin {
 public:
  // Loads the plugin at `path` (dlopen, GetPjrtApi, version check,
  // PJRT_Plugin_Initialize). Loading the same path twice returns the same
  // Plugin: initialisation runs once per process. The library is never
  // unloaded; XLA plugins start threads and register static state that does
  // not survive dlclose. Throws Error (call "Plugin::load") when the file is
  // missing, is not a PJRT plugin, has another major version, or lacks a
  // function this runtime calls.
  static std::shared_ptr<Plugin> load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  ApiVersion plugin_version() const { return plugin_version_; }
  // The version of the header this runtime was compiled against.
  static ApiVersion header_version();
  // Set when the plugin is newer than the header. Not an error: plugins
  // check each argument struct's size and refuse, with a clear PJRT error,
  // only the calls whose structs grew in between. Shown in device properties.
  const std::optional<std::string>& version_warning() const { return version_warning_; }

  const std::vector<NamedValue>& attributes() const { return attributes_; }
  std::optional<NamedValue> attribute(const std::string& name) const;

  // What distinguishes compiled executables of this plugin from another's:
  // API version, XLA and StableHLO versions, and the library's size. Part of
  // every compile-cache key.
  const std::string& identity() const { return identity_; }

  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

 private:
  Plugin(std::string path, const PJRT_Api* api);
  void initialize();

  std::string path_;
  const PJRT_Api* api_;
  ApiVersion plugin_version_;
  std::optional<std::string> version_warning_;
  std::vector<NamedValue> attributes_;
  std::string identity_;
};

}  // namespace torch_pjrt::pjrt
