#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "pjrt/executable.h"
#include "pjrt/timeline.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

TEST(Timeline, GapsAreLaunchesAfterTheDeviceFinished) {
  Timeline t;
  t.record(0, 100, 150);  // first program: no gap before it
  t.record(0, 170, 200);  // launched 20 after the device went idle
  t.record(0, 180, 260);  // launched while busy: waits until 200, no gap
  t.record(1, 300, 310);  // another device keeps its own last completion
  t.record(1, 315, 320);
  Timeline::Totals totals = t.totals();
  EXPECT_EQ(totals.idle_ns, 20 + 5);
  EXPECT_EQ(totals.busy_ns, 50 + 30 + 60 + 10 + 5);
  EXPECT_EQ(totals.programs, 5);
  t.reset();
  t.record(0, 1000, 1010);  // after a reset the first program opens no gap
  EXPECT_EQ(t.totals().idle_ns, 0);
  EXPECT_EQ(t.totals().busy_ns, 10);
}

TEST(Timeline, ExecutionsAreRecordedOnlyWhenEnabled) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  Buffer a = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  client->timeline()->reset();
  exe->execute({&a, &a}, client->device(0)).done.await();
  EXPECT_EQ(client->timeline()->totals().programs, 0);
  client->timeline()->set_enabled(true);
  exe->execute({&a, &a}, client->device(0)).done.await();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  exe->execute({&a, &a}, client->device(0)).done.await();
  client->timeline()->set_enabled(false);
  // The completion callback may run just after await returns.
  for (int i = 0; i < 100 && client->timeline()->totals().programs < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Timeline::Totals totals = client->timeline()->totals();
  EXPECT_EQ(totals.programs, 2);
  EXPECT_GE(totals.idle_ns, 25'000'000);  // the host slept 30 ms between them
  EXPECT_GT(totals.busy_ns, 0);
}

}  // namespace
}  // namespace torch_pjrt::pjrt
