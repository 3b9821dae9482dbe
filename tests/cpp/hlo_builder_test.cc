// The StableHLO builder, checked by compiling and running what it prints.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hlo/builder.h"
#include "pjrt/executable.h"
#include "test_support.h"

namespace torch_pjrt::hlo {
namespace {

using pjrt::Buffer;
using pjrt::ElementType;

class HloBuilder : public ::testing::Test {
 protected:
  std::vector<std::vector<float>> run(Builder& b, const std::vector<std::vector<float>>& inputs,
                                      const std::vector<std::vector<int64_t>>& dims) {
    std::string mlir = b.to_mlir();
    auto exe = pjrt::Executable::compile(client, mlir);
    std::vector<Buffer> buffers;
    for (size_t i = 0; i < inputs.size(); ++i) {
      buffers.push_back(pjrt::testing::f32_buffer(client, inputs[i], dims[i]));
    }
    std::vector<const Buffer*> raw;
    for (auto& buffer : buffers) raw.push_back(&buffer);
    auto result = exe->execute(raw, client->device(0));
    std::vector<std::vector<float>> out;
    for (auto& buffer : result.outputs) out.push_back(pjrt::testing::f32_values(buffer));
    return out;
  }
  std::shared_ptr<pjrt::Client> client = pjrt::testing::test_client();
  const TensorType f32_2x3{ElementType::kF32, {2, 3}};
};

TEST_F(HloBuilder, ElementwiseWithConstants) {
  Builder b("elementwise");
  Value x = b.parameter(f32_2x3);
  Value two = b.splat(b.constant(2.0, ElementType::kF32), {2, 3});
  Value y = b.binary("add", b.binary("multiply", x, two), b.unary("negate", x));
  b.set_outputs({y});
  EXPECT_EQ(run(b, {{1, 2, 3, 4, 5, 6}}, {{2, 3}})[0], (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(HloBuilder, ReduceWithRegion) {
  Builder b("row_sums");
  Value x = b.parameter(f32_2x3);
  auto sums = b.reduce({x}, {b.constant(0.0, ElementType::kF32)}, {1},
                       [](Builder& r, const std::vector<Value>& a) {
                         return std::vector<Value>{r.binary("add", a[0], a[1])};
                       });
  b.set_outputs(sums);
  EXPECT_EQ(run(b, {{1, 2, 3, 4, 5, 6}}, {{2, 3}})[0], (std::vector<float>{6, 15}));
}

TEST_F(HloBuilder, ArgmaxAsTwoInputReduce) {
  Builder b("argmax");
  Value x = b.parameter(f32_2x3);
  Value idx = b.convert(b.iota(TensorType{ElementType::kS32, {2, 3}}, 1), ElementType::kF32);
  auto out = b.reduce(
      {x, idx},
      {b.constant(-std::numeric_limits<double>::infinity(), ElementType::kF32),
       b.constant(0, ElementType::kF32)},
      {1}, [](Builder& r, const std::vector<Value>& a) {
        // a = (acc_value, acc_index, value, index)
        Value take = r.compare(a[2], a[0], Compare::kGt);
        return std::vector<Value>{r.select(take, a[2], a[0]), r.select(take, a[3], a[1])};
      });
  b.set_outputs(out);
  auto result = run(b, {{1, 9, 3, 7, 5, 6}}, {{2, 3}});
  EXPECT_EQ(result[0], (std::vector<float>{9, 7}));
  EXPECT_EQ(result[1], (std::vector<float>{1, 0}));
}

TEST_F(HloBuilder, DotGeneralBatched) {
  Builder b("bmm");
  Value x = b.parameter(TensorType{ElementType::kF32, {2, 1, 2}});
  Value y = b.parameter(TensorType{ElementType::kF32, {2, 2, 1}});
  b.set_outputs({b.dot_general(x, y, {0}, {0}, {2}, {1}, ElementType::kF32)});
  EXPECT_EQ(run(b, {{1, 2, 3, 4}, {5, 6, 7, 8}}, {{2, 1, 2}, {2, 2, 1}})[0],
            (std::vector<float>{17, 53}));
}

TEST_F(HloBuilder, ShapeOps) {
  Builder b("shapes");
  Value x = b.parameter(f32_2x3);
  Value t = b.transpose(x, {1, 0});                               // 3x2
  Value s = b.slice(t, {1, 0}, {3, 2}, {1, 1});                   // rows 1..2
  Value c = b.concatenate({s, s}, 0);                             // 4x2
  Value r = b.reshape(c, {8});
  Value rev = b.reverse(r, {0});
  Value padded = b.pad(rev, b.constant(0.0, ElementType::kF32), {1}, {0}, {0});  // 9
  b.set_outputs({padded});
  // x = [[1,2,3],[4,5,6]]; t rows 1..2 = [[2,5],[3,6]]
  EXPECT_EQ(run(b, {{1, 2, 3, 4, 5, 6}}, {{2, 3}})[0],
            (std::vector<float>{0, 6, 3, 5, 2, 6, 3, 5, 2}));
}

TEST_F(HloBuilder, DynamicUpdateSliceAndSelect) {
  Builder b("update");
  Value x = b.parameter(TensorType{ElementType::kF32, {4}});
  Value u = b.parameter(TensorType{ElementType::kF32, {2}});
  Value at = b.constant_int(1, ElementType::kS64);
  Value updated = b.dynamic_update_slice(x, u, {at});
  Value zero = b.zeros(TensorType{ElementType::kF32, {4}});
  Value positive = b.compare(updated, zero, Compare::kGt);
  b.set_outputs({b.select(positive, updated, zero)});
  EXPECT_EQ(run(b, {{-1, 2, 3, 4}, {-7, 8}}, {{4}, {2}})[0], (std::vector<float>{0, 0, 8, 4}));
}

TEST_F(HloBuilder, GatherAndScatterAdd) {
  Builder b("gather_scatter");
  Value x = b.parameter(TensorType{ElementType::kF32, {4}});
  Value idx = b.convert(b.parameter(TensorType{ElementType::kF32, {3, 1}}), ElementType::kS32);
  Builder::GatherDims g{{}, {0}, {0}, 1};
  Value picked = b.gather(x, idx, g, {1}, {3});
  Builder::ScatterDims s{{}, {0}, {0}, 1};
  Value summed = b.scatter(b.zeros(TensorType{ElementType::kF32, {4}}), idx, picked, s,
                           [](Builder& r, const std::vector<Value>& a) {
                             return std::vector<Value>{r.binary("add", a[0], a[1])};
                           });
  b.set_outputs({picked, summed});
  auto out = run(b, {{10, 20, 30, 40}, {3, 0, 3}}, {{4}, {3, 1}});
  EXPECT_EQ(out[0], (std::vector<float>{40, 10, 40}));
  EXPECT_EQ(out[1], (std::vector<float>{10, 0, 0, 80}));
}

TEST_F(HloBuilder, StableSortWithPayload) {
  Builder b("sort");
  Value keys = b.parameter(TensorType{ElementType::kF32, {5}});
  Value payload = b.convert(b.iota(TensorType{ElementType::kS32, {5}}, 0), ElementType::kF32);
  auto sorted = b.sort({keys, payload}, 0, true, [](Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{r.compare(a[0], a[1], Compare::kLt)};
  });
  b.set_outputs(sorted);
  auto out = run(b, {{3, 1, 2, 1, 0}}, {{5}});
  EXPECT_EQ(out[0], (std::vector<float>{0, 1, 1, 2, 3}));
  EXPECT_EQ(out[1], (std::vector<float>{4, 1, 3, 2, 0}));
}

TEST_F(HloBuilder, SpecialFloatConstantsRoundTrip) {
  Builder b("specials");
  Value nan = b.splat(b.constant(std::nan(""), ElementType::kF32), {1});
  Value inf = b.splat(b.constant(-INFINITY, ElementType::kF32), {1});
  Value tiny = b.splat(b.constant(1e-40, ElementType::kF32), {1});
  b.set_outputs({b.concatenate({nan, inf, tiny}, 0)});
  auto out = run(b, {}, {})[0];
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], -INFINITY);
  EXPECT_EQ(out[2], static_cast<float>(1e-40));
}

TEST_F(HloBuilder, Bf16ConvertRoundsToNearestEven) {
  Builder b("bf16");
  Value x = b.parameter(TensorType{ElementType::kF32, {2}});
  b.set_outputs({b.convert(b.convert(x, ElementType::kBF16), ElementType::kF32)});
  // 1 + 2^-8 is halfway between two bf16 values and rounds to even (1.0).
  EXPECT_EQ(run(b, {{1.0f + 1.0f / 256, 3.0f}}, {{2}})[0], (std::vector<float>{1.0f, 3.0f}));
}

TEST_F(HloBuilder, DonatedParameterIsConsumed) {
  Builder b("donate");
  Value x = b.parameter(TensorType{ElementType::kF32, {4}}, /*donate=*/true);
  b.set_outputs({b.unary("negate", x)});
  auto exe = pjrt::Executable::compile(client, b.to_mlir());
  Buffer in = pjrt::testing::f32_buffer(client, {1, 2, 3, 4}, {4});
  auto result = exe->execute({&in}, client->device(0));
  EXPECT_EQ(pjrt::testing::f32_values(result.outputs[0]), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_TRUE(in.is_deleted());
}

TEST_F(HloBuilder, ExternalFunctionPrintedOnceAndCalled) {
  // A kernel written elsewhere: a private entry that calls its own helper.
  auto fn = std::make_shared<ExternalFunction>();
  fn->symbol = "k_axpy";
  fn->text =
      "  func.func private @k_axpy(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
      "    %t = func.call @k_axpy_twice(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %r = stablehlo.add %t, %y : tensor<2x3xf32>\n"
      "    return %r : tensor<2x3xf32>\n"
      "  }\n"
      "  func.func private @k_axpy_twice(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
      "    %r = stablehlo.add %x, %x : tensor<2x3xf32>\n"
      "    return %r : tensor<2x3xf32>\n"
      "  }\n";
  fn->parameters = {f32_2x3, f32_2x3};
  fn->results = {f32_2x3};
  Builder b("external");
  Value x = b.parameter(f32_2x3);
  Value y = b.parameter(f32_2x3);
  Value once = b.call(fn, {x, y})[0];
  Value twice = b.call(fn, {once, y})[0];
  b.set_outputs({twice});
  std::string text = b.to_mlir();
  EXPECT_EQ(text.find("func.func private @k_axpy_twice"),
            text.rfind("func.func private @k_axpy_twice")) << text;
  // 2(2x + y) + y
  EXPECT_EQ(run(b, {{1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}}, {{2, 3}, {2, 3}})[0],
            (std::vector<float>{7, 11, 15, 19, 23, 27}));
  Builder wrong("wrong");
  Value z = wrong.parameter(TensorType{ElementType::kF32, {3, 2}});
  EXPECT_THROW(wrong.call(fn, {z, z}), BuildError);
  EXPECT_THROW(wrong.call(fn, {z}), BuildError);
}

TEST_F(HloBuilder, WhileLoopCarriesValues) {
  // Doubles x three times: the loop runs while its counter is below 3.
  Builder b("loop");
  Value x = b.parameter(f32_2x3);
  auto out = b.while_loop(
      {b.constant_int(0, ElementType::kS32), x},
      [](Builder& r, const std::vector<Value>& v) {
        return std::vector<Value>{r.compare(v[0], r.constant_int(3, ElementType::kS32),
                                            Compare::kLt)};
      },
      [](Builder& r, const std::vector<Value>& v) {
        return std::vector<Value>{r.binary("add", v[0], r.constant_int(1, ElementType::kS32)),
                                  r.binary("add", v[1], v[1])};
      });
  b.set_outputs({out[1]});
  EXPECT_EQ(run(b, {{1, 2, 3, 4, 5, 6}}, {{2, 3}})[0],
            (std::vector<float>{8, 16, 24, 32, 40, 48}));
}

TEST(HloBuilderChecks, WhileLoopRegionsAreChecked) {
  Builder b;
  Value i = b.constant_int(0, ElementType::kS32);
  auto keep = [](Builder&, const std::vector<Value>& v) { return v; };
  // The condition must give one 0-d i1; the body the carried types.
  EXPECT_THROW(b.while_loop({i}, keep, keep), BuildError);
  EXPECT_THROW(b.while_loop(
                   {i},
                   [](Builder& r, const std::vector<Value>&) {
                     return std::vector<Value>{r.constant_bool(false)};
                   },
                   [](Builder& r, const std::vector<Value>&) {
                     return std::vector<Value>{r.constant(1.0, ElementType::kF32)};
                   }),
               BuildError);
  EXPECT_THROW(b.while_loop({}, keep, keep), BuildError);
}

TEST(HloBuilderChecks, MismatchedOperandsAreBuildErrors) {
  Builder b;
  Value x = b.parameter(TensorType{ElementType::kF32, {2}});
  Value y = b.parameter(TensorType{ElementType::kF32, {3}});
  EXPECT_THROW(b.binary("add", x, y), BuildError);
  EXPECT_THROW(b.reshape(x, {3}), BuildError);
  EXPECT_THROW(b.transpose(x, {1}), BuildError);
  EXPECT_THROW(b.broadcast_in_dim(y, {2, 2}, {1}), BuildError);
  EXPECT_THROW(b.dot_general(x, y, {}, {}, {0}, {0}, ElementType::kF32), BuildError);
  EXPECT_THROW(b.slice(x, {0}, {3}, {1}), BuildError);
  Builder other;
  Value foreign = other.parameter(TensorType{ElementType::kF32, {2}});
  foreign.id = 99;
  EXPECT_THROW(b.unary("negate", foreign), BuildError);
}

TEST(HloBuilderChecks, StructuralHashTracksContent) {
  auto build = [](double c, ElementType t) {
    auto b = std::make_unique<Builder>("h");
    Value x = b->parameter(TensorType{t, {4}});
    b->set_outputs({b->binary("add", x, b->splat(b->constant(c, t), {4}))});
    return b;
  };
  EXPECT_EQ(build(1, ElementType::kF32)->structural_hash(),
            build(1, ElementType::kF32)->structural_hash());
  EXPECT_FALSE(build(1, ElementType::kF32)->structural_hash() ==
               build(2, ElementType::kF32)->structural_hash());
  EXPECT_FALSE(build(1, ElementType::kF32)->structural_hash() ==
               build(1, ElementType::kF64)->structural_hash());
}

}  // namespace
}  // namespace torch_pjrt::hlo
