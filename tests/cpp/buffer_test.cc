#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "pjrt/element_type.h"
#include "pjrt/error.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

class BufferRoundTrip : public ::testing::TestWithParam<ElementType> {};

std::vector<char> pattern_for(ElementType type, size_t count) {
  std::vector<char> bytes(count * byte_width(type));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 37 + 11) & 0x7f);
  if (type == ElementType::kPred) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i % 3 == 0);
  }
  return bytes;
}

TEST_P(BufferRoundTrip, BytesSurviveBothDirections) {
  ElementType type = GetParam();
  auto client = testing::test_client();
  std::vector<int64_t> dims = {3, 5};
  std::vector<char> host = pattern_for(type, 15);
  Buffer buffer = Buffer::from_host(client, client->device(0), host.data(), type, dims);
  EXPECT_EQ(buffer.element_type(), type);
  EXPECT_EQ(buffer.dims(), dims);
  EXPECT_EQ(buffer.byte_size(), host.size());
  std::vector<char> back(host.size());
  buffer.to_host(back.data(), back.size());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size()), 0) << mlir_name(type);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, BufferRoundTrip,
    ::testing::Values(ElementType::kPred, ElementType::kS8, ElementType::kS16, ElementType::kS32,
                      ElementType::kS64, ElementType::kU8, ElementType::kU16, ElementType::kU32,
                      ElementType::kU64, ElementType::kF16, ElementType::kBF16, ElementType::kF32,
                      ElementType::kF64, ElementType::kC64, ElementType::kC128,
                      ElementType::kF8E5M2, ElementType::kF8E4M3FN),
    [](const ::testing::TestParamInfo<ElementType>& info) {
      std::string name(mlir_name(info.param));
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(Buffer, ScalarAndEmpty) {
  auto client = testing::test_client();
  float scalar = 2.5f;
  Buffer s = Buffer::from_host(client, client->device(0), &scalar, ElementType::kF32, {});
  EXPECT_TRUE(s.dims().empty());
  EXPECT_EQ(testing::f32_values(s), std::vector<float>{2.5f});

  Buffer empty = Buffer::from_host(client, client->device(0), nullptr, ElementType::kF32, {0, 4});
  EXPECT_EQ(empty.element_count(), 0);
  EXPECT_EQ(empty.byte_size(), 0u);
}

TEST(Buffer, AsyncTransfersKeepHostDataAliveAndComplete) {
  auto client = testing::test_client();
  auto host = std::make_shared<std::vector<float>>(1 << 16);
  std::iota(host->begin(), host->end(), 0.0f);
  std::weak_ptr<std::vector<float>> watch = host;
  const float* data = host->data();
  Buffer buffer = Buffer::from_host_async(client, client->device(0), data, ElementType::kF32,
                                          {1 << 16}, std::shared_ptr<const void>(std::move(host)));
  buffer.ready_event().await();

  std::vector<float> back(1 << 16);
  Event done = buffer.to_host_async(back.data(), back.size() * sizeof(float));
  done.await();
  EXPECT_TRUE(done.is_ready());
  EXPECT_EQ(back[12345], 12345.0f);
  EXPECT_TRUE(watch.expired()) << "the host data should be released once the plugin is done";
}

TEST(Buffer, WrongDestinationSizeIsRefused) {
  auto client = testing::test_client();
  Buffer buffer = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  std::vector<float> small(2);
  EXPECT_THROW(buffer.to_host(small.data(), small.size() * sizeof(float)), Error);
}

TEST(Buffer, NegativeDimensionIsRefused) {
  auto client = testing::test_client();
  float x = 0;
  EXPECT_THROW(Buffer::from_host(client, client->device(0), &x, ElementType::kF32, {-1}), Error);
}

TEST(Buffer, ReleaseMarksDeleted) {
  auto client = testing::test_client();
  Buffer buffer = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  EXPECT_FALSE(buffer.is_deleted());
  buffer.release_device_memory();
  EXPECT_TRUE(buffer.is_deleted());
  std::vector<float> out(4);
  EXPECT_THROW(buffer.to_host(out.data(), 16), Error);
}

TEST(Buffer, CopiesBetweenDevices) {
  auto client = testing::test_client(2);
  Buffer on0 = testing::f32_buffer(client, {1, 2, 3, 4}, {4}, 0);
  Buffer on1 = on0.copy_to(client->device(1));
  EXPECT_EQ(on1.device(), client->device(1));
  EXPECT_EQ(testing::f32_values(on1), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Buffer, CountsTransferredBytes) {
  auto client = testing::test_client();
  client->counters().reset();
  Buffer buffer = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  testing::f32_values(buffer);
  EXPECT_EQ(client->counters().host_to_device_bytes.load(), 16);
  EXPECT_EQ(client->counters().device_to_host_bytes.load(), 16);
}

}  // namespace
}  // namespace torch_pjrt::pjrt
