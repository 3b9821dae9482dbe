#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "pjrt/executable.h"
#include "pjrt/pending_buffer.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

TEST(PendingBuffer, AnExecutionWaitsForTheFill) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  PendingBuffer pending = PendingBuffer::create(client, client->device(0), ElementType::kF32, {4});
  Buffer input = pending.take_buffer();
  EXPECT_FALSE(input.ready_event().is_ready());
  Buffer ones = testing::f32_buffer(client, {1, 1, 1, 1}, {4});
  ExecuteResult result = exe->execute({&input, &ones}, client->device(0));

  std::vector<float> data = {1, 2, 3, 4};
  std::thread filler([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pending.fill(data.data(), data.size() * sizeof(float)).await();
  });
  EXPECT_EQ(testing::f32_values(result.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
  filler.join();
  EXPECT_TRUE(pending.completed());
  EXPECT_THROW(pending.fill(data.data(), 16), Error);
}

TEST(PendingBuffer, FailReachesEveryReader) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  PendingBuffer pending = PendingBuffer::create(client, client->device(0), ElementType::kF32, {4});
  Buffer input = pending.take_buffer();
  Buffer ones = testing::f32_buffer(client, {1, 1, 1, 1}, {4});
  ExecuteResult result = exe->execute({&input, &ones}, client->device(0));
  pending.fail(ErrorCode::kDeadlineExceeded, "all_reduce #3 timed out");
  try {
    testing::f32_values(result.outputs[0]);
    FAIL() << "reading a failed buffer must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce #3 timed out"), std::string::npos);
  }
}

TEST(PendingBuffer, AbandonedBufferFailsInsteadOfHanging) {
  auto client = testing::test_client();
  std::optional<Buffer> input;
  {
    PendingBuffer pending =
        PendingBuffer::create(client, client->device(0), ElementType::kF32, {2});
    input.emplace(pending.take_buffer());
  }
  float out[2];
  EXPECT_THROW(input->to_host(out, sizeof(out)), Error);
}

TEST(PendingBuffer, WrongSizeIsRefused) {
  auto client = testing::test_client();
  PendingBuffer pending = PendingBuffer::create(client, client->device(0), ElementType::kF32, {4});
  Buffer input = pending.take_buffer();
  float data[2] = {0, 0};
  EXPECT_THROW(pending.fill(data, sizeof(data)), Error);
  EXPECT_FALSE(pending.completed());
  float full[4] = {1, 2, 3, 4};
  pending.fill(full, sizeof(full)).await();
  EXPECT_EQ(testing::f32_values(input), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace torch_pjrt::pjrt

namespace torch_pjrt::pjrt {
namespace {

TEST(PendingBuffer, FilledInPartsAndReadInParts) {
  auto client = testing::test_client();
  PendingBuffer pending = PendingBuffer::create(client, client->device(0), ElementType::kF32, {6});
  Buffer buffer = pending.take_buffer();
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  std::vector<Event> parts;
  parts.push_back(pending.fill_part(data.data(), 0, 8, false));
  parts.push_back(pending.fill_part(data.data() + 2, 8, 16, true));
  for (auto& e : parts) e.await();
  EXPECT_TRUE(pending.completed());
  EXPECT_THROW(pending.fill_part(data.data(), 0, 4, true), Error);
  std::vector<float> middle(3, 0.f);
  buffer.copy_raw_to_host_async(middle.data(), 4, 12).await();
  EXPECT_EQ(middle, (std::vector<float>{2, 3, 4}));
  EXPECT_THROW(buffer.copy_raw_to_host_async(middle.data(), 16, 12), Error);
}

TEST(PendingBuffer, PartOutsideTheBufferIsRefused) {
  auto client = testing::test_client();
  PendingBuffer pending = PendingBuffer::create(client, client->device(0), ElementType::kF32, {2});
  Buffer buffer = pending.take_buffer();
  float data[4] = {0, 0, 0, 0};
  EXPECT_THROW(pending.fill_part(data, 4, 8, true), Error);
  EXPECT_FALSE(pending.completed());
}

}  // namespace
}  // namespace torch_pjrt::pjrt
