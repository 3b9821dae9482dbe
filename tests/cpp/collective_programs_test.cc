// The collective programs run on N CPU devices of one client, launched once
// for all devices, and compared with the result computed on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "hlo/collective_programs.h"
#include "pjrt/compile_options.h"
#include "pjrt/executable.h"
#include "test_support.h"

namespace torch_pjrt::hlo {
namespace {

using pjrt::Buffer;
using pjrt::Client;

struct Compiled {
  std::shared_ptr<Client> client;
  std::unique_ptr<pjrt::Executable> exe;
};

Compiled compile(const CollectiveSpec& spec, int devices_in_client = 4) {
  Compiled run{pjrt::testing::test_client(devices_in_client), nullptr};
  Builder b("collective");
  build_collective_program(b, spec);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < spec.group_size; ++r) ids.push_back(run.client->device(r).id());
  run.exe = pjrt::Executable::compile(run.client, b.to_mlir(),
                                      pjrt::CompileOptions::replicated(ids));
  return run;
}

// inputs[rank][tensor] -> outputs[rank][tensor], f32.
std::vector<std::vector<std::vector<float>>> run_f32(
    const CollectiveSpec& spec, const std::vector<std::vector<std::vector<float>>>& inputs,
    std::optional<float> factor = std::nullopt) {
  Compiled run = compile(spec);
  std::vector<pjrt::Device> devices = run.exe->addressable_devices();
  EXPECT_EQ(static_cast<int64_t>(devices.size()), spec.group_size);
  std::vector<std::vector<Buffer>> owned(spec.group_size);
  std::vector<std::vector<const Buffer*>> args(spec.group_size);
  for (int64_t r = 0; r < spec.group_size; ++r) {
    for (const auto& values : inputs[r]) {
      owned[r].push_back(Buffer::from_host(run.client, devices[r], values.data(),
                                           pjrt::ElementType::kF32,
                                           {static_cast<int64_t>(values.size())}));
    }
    if (factor) {
      owned[r].push_back(
          Buffer::from_host(run.client, devices[r], &*factor, pjrt::ElementType::kF32, {}));
    }
    for (const Buffer& buf : owned[r]) args[r].push_back(&buf);
  }
  pjrt::ExecuteOptions options;
  options.launch_id = 1;
  auto results = run.exe->execute_all(args, options);
  std::vector<std::vector<std::vector<float>>> out(spec.group_size);
  for (int64_t r = 0; r < spec.group_size; ++r) {
    results[r].done.await();
    for (const Buffer& buf : results[r].outputs) out[r].push_back(pjrt::testing::f32_values(buf));
  }
  return out;
}

CollectiveSpec spec_of(Collective kind, int64_t group, std::vector<int64_t> numels,
                       Reduction op = Reduction::kSum) {
  CollectiveSpec s;
  s.kind = kind;
  s.group_size = group;
  s.numels = std::move(numels);
  s.reduction = op;
  return s;
}

TEST(CollectivePrograms, AllReduceEveryReduction) {
  std::vector<std::vector<std::vector<float>>> in = {{{1, -2, 3}}, {{4, 5, -6}}, {{0.5, 2, 2}}};
  struct Case {
    Reduction op;
    std::vector<float> want;
  };
  for (const Case& c : {Case{Reduction::kSum, {5.5, 5, -1}}, Case{Reduction::kAvg, {5.5f / 3, 5.f / 3, -1.f / 3}},
                        Case{Reduction::kProduct, {2, -20, -36}}, Case{Reduction::kMin, {0.5, -2, -6}},
                        Case{Reduction::kMax, {4, 5, 3}}}) {
    auto out = run_f32(spec_of(Collective::kAllReduce, 3, {3}, c.op), in);
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(out[r][0][i], c.want[i]) << reduction_name(c.op);
    }
  }
}

TEST(CollectivePrograms, CoalescedAllReduceAndPremulSum) {
  auto spec = spec_of(Collective::kAllReduce, 2, {2, 3}, Reduction::kPremulSum);
  auto out = run_f32(spec, {{{1, 2}, {3, 4, 5}}, {{10, 20}, {30, 40, 50}}}, 0.5f);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r][0], (std::vector<float>{5.5, 11}));
    EXPECT_EQ(out[r][1], (std::vector<float>{16.5, 22, 27.5}));
  }
}

TEST(CollectivePrograms, AllGatherReduceScatterAllToAll) {
  auto gathered = run_f32(spec_of(Collective::kAllGather, 2, {2}), {{{1, 2}}, {{3, 4}}});
  EXPECT_EQ(gathered[0][0], (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(gathered[1][0], (std::vector<float>{1, 2, 3, 4}));

  auto scattered = run_f32(spec_of(Collective::kReduceScatter, 2, {4}, Reduction::kAvg),
                           {{{1, 2, 3, 4}}, {{3, 4, 5, 6}}});
  EXPECT_EQ(scattered[0][0], (std::vector<float>{2, 3}));
  EXPECT_EQ(scattered[1][0], (std::vector<float>{4, 5}));

  auto exchanged = run_f32(spec_of(Collective::kAllToAll, 2, {4}), {{{1, 2, 3, 4}}, {{5, 6, 7, 8}}});
  EXPECT_EQ(exchanged[0][0], (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(exchanged[1][0], (std::vector<float>{3, 4, 7, 8}));
}

TEST(CollectivePrograms, BroadcastKeepsTheRootsBitsExactly) {
  auto spec = spec_of(Collective::kBroadcast, 3, {4});
  spec.root = 1;
  float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = run_f32(spec, {{{9, 9, 9, 9}}, {{-0.0f, nan, 1e-40f, -3}}, {{7, 7, 7, 7}}});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(std::signbit(out[r][0][0])) << "-0.0 must stay negative on rank " << r;
    EXPECT_TRUE(std::isnan(out[r][0][1]));
    EXPECT_EQ(out[r][0][2], 1e-40f);  // a denormal passes as bits
    EXPECT_EQ(out[r][0][3], -3.0f);
  }
}

TEST(CollectivePrograms, SendRecvDeliversToTheTarget) {
  auto out = run_f32(spec_of(Collective::kSendRecv, 2, {3}), {{{1, 2, 3}}, {{0, 0, 0}}});
  EXPECT_EQ(out[1][0], (std::vector<float>{1, 2, 3}));
}

TEST(CollectivePrograms, IntegerAndBoolReductions) {
  // s32 average truncates toward zero; bool max is "any".
  CollectiveSpec ints = spec_of(Collective::kAllReduce, 2, {2}, Reduction::kAvg);
  ints.type = ElementType::kS32;
  Compiled r = compile(ints);
  auto devices = r.exe->addressable_devices();
  int32_t a[2] = {3, -3}, b[2] = {0, 0};
  Buffer ba = Buffer::from_host(r.client, devices[0], a, pjrt::ElementType::kS32, {2});
  Buffer bb = Buffer::from_host(r.client, devices[1], b, pjrt::ElementType::kS32, {2});
  auto res = r.exe->execute_all({{&ba}, {&bb}});
  int32_t got[2];
  res[0].outputs[0].to_host(got, sizeof(got));
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], -1);

  CollectiveSpec any = spec_of(Collective::kAllReduce, 2, {3}, Reduction::kMax);
  any.type = ElementType::kPred;
  Compiled p = compile(any);
  devices = p.exe->addressable_devices();
  bool x[3] = {true, false, false}, y[3] = {false, false, true};
  Buffer bx = Buffer::from_host(p.client, devices[0], x, pjrt::ElementType::kPred, {3});
  Buffer by = Buffer::from_host(p.client, devices[1], y, pjrt::ElementType::kPred, {3});
  auto pres = p.exe->execute_all({{&bx}, {&by}});
  bool out[3];
  pres[1].outputs[0].to_host(out, sizeof(out));
  EXPECT_TRUE(out[0]);
  EXPECT_FALSE(out[1]);
  EXPECT_TRUE(out[2]);
}

// Runs an s32 collective on two devices; returns rank `who`'s output.
std::vector<int32_t> run_s32(CollectiveSpec spec, std::vector<std::vector<int32_t>> in, int who) {
  spec.type = ElementType::kS32;
  Compiled c = compile(spec);
  auto devices = c.exe->addressable_devices();
  std::vector<Buffer> bufs;
  for (int r = 0; r < 2; ++r) {
    bufs.push_back(Buffer::from_host(c.client, devices[r], in[r].data(), pjrt::ElementType::kS32,
                                     {static_cast<int64_t>(in[r].size())}));
  }
  auto res = c.exe->execute_all({{&bufs[0]}, {&bufs[1]}});
  std::vector<int32_t> out(res[who].outputs[0].element_count());
  res[who].outputs[0].to_host(out.data(), out.size() * 4);
  return out;
}

TEST(CollectivePrograms, BitwiseReductionsGatherAndReduceInProgram) {
  std::vector<std::vector<int32_t>> in = {{0b1100, -1, 5, 0}, {0b1010, 7, 3, 9}};
  EXPECT_EQ(run_s32(spec_of(Collective::kAllReduce, 2, {4}, Reduction::kBitAnd), in, 1),
            (std::vector<int32_t>{0b1000, 7, 1, 0}));
  EXPECT_EQ(run_s32(spec_of(Collective::kAllReduce, 2, {4}, Reduction::kBitOr), in, 0),
            (std::vector<int32_t>{0b1110, -1, 7, 9}));
  EXPECT_EQ(run_s32(spec_of(Collective::kAllReduce, 2, {4}, Reduction::kBitXor), in, 0),
            (std::vector<int32_t>{0b0110, -8, 6, 9}));
  // Reduce-scatter keeps each rank's block of the result.
  EXPECT_EQ(run_s32(spec_of(Collective::kReduceScatter, 2, {4}, Reduction::kBitOr), in, 1),
            (std::vector<int32_t>{7, 9}));
}

TEST(CollectivePrograms, UnsupportedSpecsSayWhy) {
  auto bitwise_float = spec_of(Collective::kAllReduce, 2, {4}, Reduction::kBitAnd);
  EXPECT_NE(bitwise_float.unsupported_reason().find("bitwise reductions need integer"),
            std::string::npos);
  Builder b("x");
  EXPECT_THROW(build_collective_program(b, bitwise_float), BuildError);
  auto uneven = spec_of(Collective::kReduceScatter, 3, {4});
  EXPECT_NE(uneven.unsupported_reason().find("do not split into 3"), std::string::npos);
  auto bad_root = spec_of(Collective::kBroadcast, 2, {4});
  bad_root.root = 2;
  EXPECT_NE(bad_root.unsupported_reason().find("root 2"), std::string::npos);
  EXPECT_EQ(spec_of(Collective::kAllReduce, 2, {4, 8}).describe(),
            "all_reduce(sum) of f32[4] and f32[8] across 2 ranks");
}

TEST(CollectivePrograms, KeyDistinguishesEveryField) {
  auto a = spec_of(Collective::kAllReduce, 2, {4});
  auto b = a;
  b.reduction = Reduction::kMax;
  auto c = a;
  c.numels = {4, 4};
  auto d = a;
  d.group_size = 4;
  EXPECT_FALSE(a.key() == b.key());
  EXPECT_FALSE(a.key() == c.key());
  EXPECT_FALSE(a.key() == d.key());
  EXPECT_EQ(a.key(), spec_of(Collective::kAllReduce, 2, {4}).key());
}

TEST(CompileOptionsAssignment, SerializesTheDeviceAssignment) {
  auto options = pjrt::CompileOptions::replicated({2, 1});
  std::string bytes = options.serialize();
  // device_assignment (field 9) = {replica_count 2, computation_count 1,
  // computation_devices {replica_device_ids packed [2, 1]}}.
  std::string assignment("\x08\x02\x10\x01\x1a\x04\x0a\x02\x02\x01", 10);
  EXPECT_NE(bytes.find("\x4a\x0a" + assignment), std::string::npos);
  pjrt::CompileOptions portable_with_assignment = options;
  portable_with_assignment.portable = true;
  EXPECT_THROW(portable_with_assignment.serialize(), pjrt::Error);
}

TEST(CollectivePrograms, RunOnTheAssignedDevicesInOrder) {
  auto client = pjrt::testing::test_client(4);
  Builder b("gather");
  build_collective_program(b, spec_of(Collective::kAllGather, 2, {1}));
  auto exe = pjrt::Executable::compile(
      client, b.to_mlir(),
      pjrt::CompileOptions::replicated({client->device(3).id(), client->device(1).id()}));
  auto devices = exe->addressable_devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].id(), client->device(3).id());
  float x = 30, y = 10;
  Buffer bx = Buffer::from_host(client, devices[0], &x, pjrt::ElementType::kF32, {1});
  Buffer by = Buffer::from_host(client, devices[1], &y, pjrt::ElementType::kF32, {1});
  auto res = exe->execute_all({{&bx}, {&by}});
  EXPECT_EQ(pjrt::testing::f32_values(res[1].outputs[0]), (std::vector<float>{30, 10}));
  EXPECT_EQ(res[1].outputs[0].device().id(), client->device(1).id());
  EXPECT_THROW(exe->execute_all({{&bx}}), pjrt::Error);
}

}  // namespace
}  // namespace torch_pjrt::hlo
