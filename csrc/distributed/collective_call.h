// One collective as the tpu backend received it from c10d, in a single
// shape whatever the entry point (all_reduce, all_gather_into_tensor, the
// coalesced forms, ...): the tensors this rank contributes, the tensors it
// receives into, and the few numbers every rank of the group must agree on.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hlo/collective_programs.h"

namespace torch_pjrt::distributed {

enum class CallKind : int64_t {
  kAllReduce,           // inputs reduced in place
  kBroadcast,           // root's inputs copied into everyone's
  kReduce,              // like all_reduce, written on the root only
  kAllGather,           // input -> one output of group * numel (also coalesced)
  kAllGatherList,       // input -> one output tensor per rank
  kReduceScatter,       // input of group * numel -> output (also coalesced)
  kReduceScatterList,   // one input per rank -> output
  kAllToAll,            // all_to_all_single, equal or uneven splits
  kAllToAllList,        // one input and one output per rank
  kGather,              // input -> root's list
  kScatter,             // root's list -> output
  kSend,
  kRecv,
  kBarrier,
};

// torch's name of the operation, as users call it.
const char* call_name(CallKind kind);

struct CollectiveCall {
  CallKind kind = CallKind::kAllReduce;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
  hlo::Reduction reduction = hlo::Reduction::kSum;
  double premul_factor = 1.0;  // kPremulSum
  int64_t root = 0;            // broadcast, reduce, gather, scatter; send: dst; recv: src
  int64_t tag = 0;
  std::vector<int64_t> input_splits, output_splits;  // kAllToAll; empty: equal
  uint64_t seq = 0;                                  // this group's count of calls

  // The numbers ranks compare before moving data: kind, dtype, reduction,
  // root, the element count every rank contributes, and how many tensors.
  using Signature = std::array<int64_t, 6>;
  Signature signature() const;
  // "all_reduce(sum) of float32[4, 4]": this rank's view of the call.
  std::string describe() const;
  // "all_reduce #3": names the call in errors.
  std::string label() const;
};

// "torch.float32", as Python spells a dtype.
std::string dtype_name(c10::ScalarType dtype);

// Reads a signature back as words for an error message.
std::string describe_signature(const CollectiveCall::Signature& s);

// The reduction of a c10d ReduceOp for tensors of `dtype`; throws a
// RuntimeError naming `op` when the reduction does not apply to the dtype
// (a bitwise AND of floats, the average of bools).
hlo::Reduction reduction_of(const c10d::ReduceOp& op, c10::ScalarType dtype, const char* op_name,
                            double* premul_factor);

// Checks what one rank passed, before anything is sent: tpu tensors, one
// dtype, output sizes that fit the group. Raises torch-style errors naming
// the op, shapes and dtypes.
void check_call(const CollectiveCall& call, int rank, int size);

// Calls made on this process's tpu groups, by torch name, and the bytes
// they contributed: metrics()["collectives"] and ["collective_bytes"].
void count_call(const CollectiveCall& call);
std::vector<std::pair<std::string, int64_t>> call_counts();
int64_t call_bytes();
void reset_call_counts();

}  // namespace torch_pjrt::distributed
