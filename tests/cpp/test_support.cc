#include "test_support.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace torch_pjrt::pjrt::testing {

std::shared_ptr<Plugin> test_plugin() {
  const char* path = std::getenv("TORCH_PJRT_TEST_PLUGIN");
  if (path == nullptr || *path == '\0') {
    throw std::runtime_error("TORCH_PJRT_TEST_PLUGIN is not set; run the tests through ctest");
  }
  return Plugin::load(path);
}

std::shared_ptr<Client> test_client(int devices) {
  return Client::create(test_plugin(), ClientOptions::cpu(devices));
}

Buffer f32_buffer(const std::shared_ptr<Client>& client, const std::vector<float>& values,
                  const std::vector<int64_t>& dims, int device) {
  return Buffer::from_host(client, client->device(device), values.data(), ElementType::kF32, dims);
}

std::vector<float> f32_values(const Buffer& buffer) {
  std::vector<float> out(buffer.element_count());
  buffer.to_host(out.data(), out.size() * sizeof(float));
  return out;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "torch_pjrt_test_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

const char* const kAddProgram = R"mlir(
module @add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir";

const char* const kDotProgram = R"mlir(
module @dot {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
        : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}
)mlir";

}  // namespace torch_pjrt::pjrt::testing
