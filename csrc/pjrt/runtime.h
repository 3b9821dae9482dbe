// One plugin, its client and its compile cache: what a process needs to run
// programs on a PJRT device. Built from explicit options; nothing here reads
// the environment (the Python settings table does, once).
#pragma once

#include <memory>
#include <string>

#include "pjrt/client.h"
#include "pjrt/compile_cache.h"
#include "pjrt/plugin.h"

namespace torch_pjrt::pjrt {

struct RuntimeOptions {
  std::string plugin_path;
  ClientOptions client_options;
  // Empty: no disk cache.
  std::string cache_dir;
};

class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& options);

  Plugin& plugin() { return *plugin_; }
  const std::shared_ptr<Client>& client() { return client_; }
  CompileCache& cache() { return cache_; }

 private:
  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<Client> client_;
  CompileCache cache_;
};

}  // namespace torch_pjrt::pjrt
