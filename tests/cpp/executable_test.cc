#include <gtest/gtest.h>

#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "test_support.h"

namespace torch_pjrt::pjrt {
namespace {

using testing::f32_buffer;
using testing::f32_values;

std::vector<float> run_single(const Executable& exe, const std::vector<const Buffer*>& inputs,
                              const Device& device) {
  ExecuteResult result = exe.execute(inputs, device);
  EXPECT_EQ(result.outputs.size(), 1u);
  return f32_values(result.outputs[0]);
}

TEST(Executable, Add) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  EXPECT_EQ(exe->num_outputs(), 1u);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  Buffer b = f32_buffer(client, {10, 20, 30, 40}, {4});
  EXPECT_EQ(run_single(*exe, {&a, &b}, client->device(0)), (std::vector<float>{11, 22, 33, 44}));
}

TEST(Executable, Dot) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kDotProgram);
  Buffer a = f32_buffer(client, {1, 2, 3, 4, 5, 6}, {2, 3});
  Buffer b = f32_buffer(client, {7, 8, 9, 10, 11, 12}, {3, 2});
  // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]]
  EXPECT_EQ(run_single(*exe, {&a, &b}, client->device(0)),
            (std::vector<float>{58, 64, 139, 154}));
}

TEST(Executable, Reduce) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, R"mlir(
module @reduce {
  func.func public @main(%a: tensor<2x3xf32>) -> tensor<2xf32> {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %zero) applies stablehlo.add across dimensions = [1]
        : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
)mlir");
  Buffer a = f32_buffer(client, {1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(run_single(*exe, {&a}, client->device(0)), (std::vector<float>{6, 15}));
}

TEST(Executable, MultipleOutputsAndIntegerTypes) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, R"mlir(
module @sum_and_product {
  func.func public @main(%a: tensor<3xi32>, %b: tensor<3xi32>) -> (tensor<3xi32>, tensor<3xi32>) {
    %0 = stablehlo.add %a, %b : tensor<3xi32>
    %1 = stablehlo.multiply %a, %b : tensor<3xi32>
    return %0, %1 : tensor<3xi32>, tensor<3xi32>
  }
}
)mlir");
  ASSERT_EQ(exe->num_outputs(), 2u);
  std::vector<int32_t> x = {1, -2, 3}, y = {4, 5, -6};
  Buffer a = Buffer::from_host(client, client->device(0), x.data(), ElementType::kS32, {3});
  Buffer b = Buffer::from_host(client, client->device(0), y.data(), ElementType::kS32, {3});
  ExecuteResult result = exe->execute({&a, &b}, client->device(0));
  result.done.await();
  std::vector<int32_t> sum(3), product(3);
  result.outputs[0].to_host(sum.data(), 12);
  result.outputs[1].to_host(product.data(), 12);
  EXPECT_EQ(sum, (std::vector<int32_t>{5, 3, -3}));
  EXPECT_EQ(product, (std::vector<int32_t>{4, -10, -18}));
}

TEST(Executable, RunsOnTheChosenDevice) {
  auto client = testing::test_client(2);
  auto exe = Executable::compile(client, testing::kAddProgram);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4}, 1);
  Buffer b = f32_buffer(client, {1, 1, 1, 1}, {4}, 1);
  ExecuteResult result = exe->execute({&a, &b}, client->device(1));
  EXPECT_EQ(result.outputs[0].device(), client->device(1));
  EXPECT_EQ(f32_values(result.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
}

TEST(Executable, DonatedInputIsConsumed) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, R"mlir(
module @donate {
  func.func public @main(%a: tensor<4xf32> {jax.buffer_donor = true}, %b: tensor<4xf32>)
      -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir");
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  Buffer b = f32_buffer(client, {1, 1, 1, 1}, {4});
  ExecuteResult result = exe->execute({&a, &b}, client->device(0));
  EXPECT_EQ(f32_values(result.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_TRUE(a.is_deleted()) << "the donated input should be consumed";
  EXPECT_FALSE(b.is_deleted());

  // The same program with donation refused for this call keeps the input.
  Buffer c = f32_buffer(client, {1, 2, 3, 4}, {4});
  ExecuteOptions keep;
  keep.non_donatable_inputs = {0};
  ExecuteResult kept = exe->execute({&c, &b}, client->device(0), keep);
  EXPECT_EQ(f32_values(kept.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_FALSE(c.is_deleted());
}

TEST(Executable, MalformedProgramIsCompileError) {
  auto client = testing::test_client();
  try {
    Executable::compile(client, "module { func.func @main( this is not mlir");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.call(), "PJRT_Client_Compile");
    EXPECT_FALSE(e.message().empty());
  }
}

TEST(Executable, WrongArgumentCountIsError) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  try {
    exe->execute({&a}, client->device(0));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("takes 2 argument(s), got 1"), std::string::npos);
  }
}

TEST(Executable, WrongArgumentTypeIsError) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  std::vector<int32_t> ints = {1, 2, 3, 4};
  Buffer a = Buffer::from_host(client, client->device(0), ints.data(), ElementType::kS32, {4});
  Buffer b = f32_buffer(client, {1, 2, 3, 4}, {4});
  // The CPU plugin itself would reinterpret the bytes; the runtime refuses.
  try {
    exe->execute({&a, &b}, client->device(0));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("argument 0 of program 'add' must be f32[4], got i32[4]"),
              std::string::npos)
        << e.what();
  }
  Buffer wrong_shape = f32_buffer(client, {1, 2}, {2});
  EXPECT_THROW(exe->execute({&wrong_shape, &b}, client->device(0)), Error);
}

TEST(ProgramSignature, ParsesMainParameters) {
  auto specs = parse_main_signature(R"(func.func public @main(%a: tensor<2x?xbf16> {jax.buffer_donor = true},
      %b: tensor<i1>, %c: tensor<3xcomplex<f32>>) -> tensor<f32> {)");
  ASSERT_TRUE(specs.has_value());
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].to_string(), "bf16[2,?]");
  EXPECT_EQ((*specs)[1].to_string(), "i1[]");
  EXPECT_EQ((*specs)[2].to_string(), "complex<f32>[3]");
  EXPECT_TRUE((*specs)[0].matches(ElementType::kBF16, {2, 7}));
  EXPECT_FALSE((*specs)[0].matches(ElementType::kBF16, {3, 7}));
  EXPECT_FALSE(parse_main_signature("no function here").has_value());
}

TEST(Executable, SerializeRoundTrip) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  std::string bytes = exe->serialize();
  ASSERT_FALSE(bytes.empty());
  auto loaded = Executable::deserialize(client, bytes);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  Buffer b = f32_buffer(client, {4, 3, 2, 1}, {4});
  EXPECT_EQ(run_single(*loaded, {&a, &b}, client->device(0)), (std::vector<float>{5, 5, 5, 5}));
}

TEST(Executable, CountsExecutions) {
  auto client = testing::test_client();
  auto exe = Executable::compile(client, testing::kAddProgram);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  client->counters().reset();
  for (int i = 0; i < 3; ++i) exe->execute({&a, &a}, client->device(0));
  EXPECT_EQ(client->counters().executions.load(), 3);
}

}  // namespace
}  // namespace torch_pjrt::pjrt
