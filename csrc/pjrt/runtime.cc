#include "pjrt/runtime.h"

namespace torch_pjrt::pjrt {

Runtime::Runtime(const RuntimeOptions& options)
    : plugin_(Plugin::load(options.plugin_path)),
      client_(Client::create(plugin_, options.client_options)),
      cache_(client_, options.cache_dir) {}

}  // namespace torch_pjrt::pjrt
