#include <gtest/gtest.h>

#include <cstdlib>

#include "pjrt/error.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

TEST(Client, OneCpuDevice) {
  auto client = testing::test_client(1);
  EXPECT_EQ(client->platform_name(), "cpu");
  ASSERT_EQ(client->devices().size(), 1u);
  const Device& device = client->device(0);
  EXPECT_EQ(device.id(), 0);
  EXPECT_FALSE(device.kind().empty());
  EXPECT_FALSE(device.debug_string().empty());
  // The CPU plugin may or may not report memory statistics; either is fine,
  // but the call must not throw.
  EXPECT_NO_THROW(device.memory_stats());
}

TEST(Client, DeviceCountFollowsOption) {
  int wanted = 2;
  if (const char* env = std::getenv("TORCH_PJRT_CPU_DEVICES")) wanted = std::max(2, std::atoi(env));
  auto client = testing::test_client(wanted);
  ASSERT_EQ(static_cast<int>(client->devices().size()), wanted);
  EXPECT_NE(client->device(0).id(), client->device(1).id());
}

TEST(Client, OutOfRangeDeviceIsClearError) {
  auto client = testing::test_client(1);
  try {
    client->device(3);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("device index 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace torch_pjrt::pjrt
