#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "pjrt/event.h"
#include "pjrt/executable.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

// A program that runs far longer than a microsecond: a 512x512 product
// repeated in a loop, so a one-microsecond poll must give up and block.
constexpr const char* kLongProgram = R"mlir(
module @long {
  func.func public @main(%a: tensor<512x512xf32>) -> tensor<512x512xf32> {
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.constant dense<16> : tensor<i32>
    %scale = stablehlo.constant dense<0.001953125> : tensor<512x512xf32>
    %r:2 = stablehlo.while(%i = %zero, %x = %a) : tensor<i32>, tensor<512x512xf32>
      cond {
        %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      } do {
        %p = stablehlo.dot %x, %a : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
        %y = stablehlo.multiply %p, %scale : tensor<512x512xf32>
        %j = stablehlo.add %i, %one : tensor<i32>
        stablehlo.return %j, %y : tensor<i32>, tensor<512x512xf32>
      }
    return %r#1 : tensor<512x512xf32>
  }
}
)mlir";

TEST(Event, PollingAwaitBlocksPastItsPollUntilTheWorkIsDone) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, kLongProgram);
  Buffer a = testing::f32_buffer(client, std::vector<float>(512 * 512, 1.0f), {512, 512});
  ExecuteResult result = exe->execute({&a}, client->device(0));
  result.done.await_polling("long program", std::chrono::microseconds(1));
  EXPECT_TRUE(result.done.is_ready());
  // All ones times all ones / 512 is all ones again, every iteration.
  std::vector<float> out = testing::f32_values(result.outputs[0]);
  ASSERT_EQ(out.size(), 512u * 512u);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[512 * 512 - 1], 1.0f);
}

TEST(Event, PollingAwaitOfAReadyOrEmptyEventReturns) {
  Event empty;
  empty.await_polling("empty", kHostSyncPoll);  // no event: nothing to wait for
  auto client = testing::test_client();
  Buffer a = testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  Event ready = a.ready_event();
  ready.await();
  ready.await_polling("ready", kHostSyncPoll);
  EXPECT_TRUE(ready.is_ready());
}

}  // namespace
}  // namespace torch_pjrt::pjrt
