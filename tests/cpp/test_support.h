// Shared set-up for the runtime tests: the plugin under test, clients, and
// small StableHLO programs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/client.h"
#include "pjrt/plugin.h"

namespace torch_pjrt::pjrt::testing {

// The plugin named by TORCH_PJRT_TEST_PLUGIN (set by ctest).
std::shared_ptr<Plugin> test_plugin();
// A client on the test plugin with `devices` CPU devices.
std::shared_ptr<Client> test_client(int devices = 1);

Buffer f32_buffer(const std::shared_ptr<Client>& client, const std::vector<float>& values,
                  const std::vector<int64_t>& dims, int device = 0);
std::vector<float> f32_values(const Buffer& buffer);

// A fresh empty folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Programs used by several tests.
extern const char* const kAddProgram;  // f32[4] + f32[4]
extern const char* const kDotProgram;  // f32[2,3] x f32[3,2]

}  // namespace torch_pjrt::pjrt::testing
