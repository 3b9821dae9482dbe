#include "pjrt/plugin.h"

#include <dlfcn.h>
#include <limits.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "pjrt/error.h"
#include "pjrt/hash.h"

namespace torch_pjrt::pjrt {
namespace {

// The PJRT_Api entries this runtime calls, with the offset each occupies.
// A plugin whose table is too short for one of them, or leaves it null, is
// refused at load instead of crashing at first use.
struct RequiredFunction {
  const char* name;
  size_t offset;
};

#define TORCH_PJRT_REQUIRED(fn) RequiredFunction{#fn, offsetof(PJRT_Api, fn)}
constexpr RequiredFunction kRequired[] = {
    TORCH_PJRT_REQUIRED(PJRT_Error_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_Error_Message),
    TORCH_PJRT_REQUIRED(PJRT_Error_GetCode),
    TORCH_PJRT_REQUIRED(PJRT_Plugin_Initialize),
    TORCH_PJRT_REQUIRED(PJRT_Plugin_Attributes),
    TORCH_PJRT_REQUIRED(PJRT_Event_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_Event_IsReady),
    TORCH_PJRT_REQUIRED(PJRT_Event_Error),
    TORCH_PJRT_REQUIRED(PJRT_Event_Await),
    TORCH_PJRT_REQUIRED(PJRT_Event_OnReady),
    TORCH_PJRT_REQUIRED(PJRT_Client_Create),
    TORCH_PJRT_REQUIRED(PJRT_Client_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_Client_PlatformName),
    TORCH_PJRT_REQUIRED(PJRT_Client_PlatformVersion),
    TORCH_PJRT_REQUIRED(PJRT_Client_AddressableDevices),
    TORCH_PJRT_REQUIRED(PJRT_Client_Compile),
    TORCH_PJRT_REQUIRED(PJRT_Client_BufferFromHostBuffer),
    TORCH_PJRT_REQUIRED(PJRT_DeviceDescription_Id),
    TORCH_PJRT_REQUIRED(PJRT_DeviceDescription_Kind),
    TORCH_PJRT_REQUIRED(PJRT_DeviceDescription_DebugString),
    TORCH_PJRT_REQUIRED(PJRT_DeviceDescription_Attributes),
    TORCH_PJRT_REQUIRED(PJRT_Device_GetDescription),
    TORCH_PJRT_REQUIRED(PJRT_Device_LocalHardwareId),
    TORCH_PJRT_REQUIRED(PJRT_Device_MemoryStats),
    TORCH_PJRT_REQUIRED(PJRT_Executable_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_Executable_Name),
    TORCH_PJRT_REQUIRED(PJRT_Executable_NumOutputs),
    TORCH_PJRT_REQUIRED(PJRT_Executable_Serialize),
    TORCH_PJRT_REQUIRED(PJRT_LoadedExecutable_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_LoadedExecutable_GetExecutable),
    TORCH_PJRT_REQUIRED(PJRT_LoadedExecutable_Execute),
    TORCH_PJRT_REQUIRED(PJRT_LoadedExecutable_AddressableDevices),
    TORCH_PJRT_REQUIRED(PJRT_Executable_DeserializeAndLoad),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_Destroy),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_ElementType),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_Dimensions),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_OnDeviceSizeInBytes),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_Device),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_Delete),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_IsDeleted),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_CopyToDevice),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_ToHostBuffer),
    TORCH_PJRT_REQUIRED(PJRT_Buffer_ReadyEvent),
};
#undef TORCH_PJRT_REQUIRED

void check_function_table(const PJRT_Api* api, const std::string& path) {
  for (const RequiredFunction& fn : kRequired) {
    bool present = api->struct_size >= fn.offset + sizeof(void*) &&
                   *reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api) + fn.offset);
    if (!present) {
      throw Error("Plugin::load", ErrorCode::kUnimplemented,
                  path + " does not provide " + fn.name + ", which torch-pjrt needs");
    }
  }
}

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, std::shared_ptr<Plugin>>& registry() {
  static auto* plugins = new std::map<std::string, std::shared_ptr<Plugin>>();  // never destroyed
  return *plugins;
}

std::string canonical_path(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    throw Error("Plugin::load", ErrorCode::kNotFound,
                "no PJRT plugin at '" + path + "' (the file does not exist or is unreadable)");
  }
  return resolved;
}

// The XLA plugins carry no ELF build id, their xla_version attribute is a
// small API counter, and pip does not keep file times, so a build is told
// from another by its size and a hash of its first and last MiB (ELF and
// section headers, symbol tables): cheap, and stable across reinstalls.
std::string file_fingerprint(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return "unreadable";
  const std::streamoff size = file.tellg();
  const std::streamoff window = std::min<std::streamoff>(size, 1 << 20);
  std::string head(window, '\0'), tail(window, '\0');
  file.seekg(0);
  file.read(head.data(), window);
  file.seekg(size - window);
  file.read(tail.data(), window);
  return std::to_string(size) + ":" + Hasher().add(head).add(tail).finish().hex();
}

}  // namespace

ApiVersion Plugin::header_version() { return {PJRT_API_MAJOR, PJRT_API_MINOR}; }

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  std::string canonical = canonical_path(path);
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& plugins = registry();
  if (auto it = plugins.find(canonical); it != plugins.end()) return it->second;

  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error("Plugin::load", ErrorCode::kInvalidArgument,
                "cannot load '" + canonical + "': " + (why ? why : "dlopen failed"));
  }
  // Closed again only when it turns out not to be a plugin: once any plugin
  // code has run, the library stays loaded (see Plugin::load in plugin.h).
  std::unique_ptr<void, int (*)(void*)> not_a_plugin(handle, dlclose);
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error("Plugin::load", ErrorCode::kInvalidArgument,
                "'" + canonical + "' is not a PJRT plugin (no GetPjrtApi symbol)");
  }
  not_a_plugin.release();
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    throw Error("Plugin::load", ErrorCode::kInternal, "GetPjrtApi in '" + canonical + "' returned null");
  }
  std::shared_ptr<Plugin> plugin(new Plugin(canonical, api));
  plugin->initialize();
  plugins.emplace(canonical, plugin);
  return plugin;
}

Plugin::Plugin(std::string path, const PJRT_Api* api)
    : path_(std::move(path)),
      api_(api),
      plugin_version_{api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version} {}

void Plugin::initialize() {
  ApiVersion ours = header_version();
  if (plugin_version_.major != ours.major) {
    throw Error("Plugin::load", ErrorCode::kFailedPrecondition,
                path_ + " implements PJRT C API " + std::to_string(plugin_version_.major) + "." +
                    std::to_string(plugin_version_.minor) + "; torch-pjrt was built for major " +
                    std::to_string(ours.major));
  }
  if (plugin_version_.minor > ours.minor) {
    version_warning_ = "PJRT plugin " + path_ + " implements C API " +
                       std::to_string(plugin_version_.major) + "." +
                       std::to_string(plugin_version_.minor) + ", newer than the " +
                       std::to_string(ours.major) + "." + std::to_string(ours.minor) +
                       " header torch-pjrt was built with; calls whose argument structs grew in "
                       "between will be refused by the plugin";
  }
  check_function_table(api_, path_);

  auto init = TORCH_PJRT_ARGS(PJRT_Plugin_Initialize_Args);
  check(api_, api_->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");

  auto attrs = TORCH_PJRT_ARGS(PJRT_Plugin_Attributes_Args);
  check(api_, api_->PJRT_Plugin_Attributes(&attrs), "PJRT_Plugin_Attributes");
  attributes_ = copy_named_values(attrs.attributes, attrs.num_attributes);

  identity_ = "pjrt_api=" + std::to_string(plugin_version_.major) + "." +
              std::to_string(plugin_version_.minor) + ";file=" + file_fingerprint(path_);
  for (const char* key : {"xla_version", "stablehlo_current_version", "stablehlo_minimum_version"}) {
    if (auto value = attribute(key)) identity_ += std::string(";") + key + "=" + value->value_string();
  }
  // The XLA plugins read their compiler flags from these variables when
  // they start; the flags change the code an executable holds (XNNPACK
  // dots, fast math, the runtime), so an executable compiled under other
  // flags must not be loaded from the disk cache. They are the plugin's
  // inputs, not torch-pjrt settings, hence read here.
  for (const char* name : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') identity_ += std::string(";") + name + "=" + value;
  }
}

std::optional<NamedValue> Plugin::attribute(const std::string& name) const {
  for (const NamedValue& v : attributes_) {
    if (v.name == name) return v;
  }
  return std::nullopt;
}

}  // namespace torch_pjrt::pjrt
