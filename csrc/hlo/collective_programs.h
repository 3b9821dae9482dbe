// Whole programs for one collective call: what the tpu c10d backend compiles
// (with a device assignment) and launches on every device of a group at
// once. Tensors travel flat (f32[n]); callers reshape. No torch here, so the
// programs are tested on N CPU devices from plain C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/hash.h"

namespace torch_pjrt::hlo {

enum class Collective {
  kAllReduce,      // each input combined across the group, in place
  kBroadcast,      // `root`'s inputs copied to every replica
  kAllGather,      // f[n] -> f[group * n], in replica order
  kReduceScatter,  // f[group * n] -> f[n]: the combined block of this replica
  kAllToAll,       // f[group * n] -> f[group * n]: block j goes to replica j
  kSendRecv,       // two replicas: replica 0's input arrives at replica 1
};

enum class Reduction { kSum, kAvg, kProduct, kMin, kMax, kPremulSum, kBitAnd, kBitOr, kBitXor };

const char* collective_name(Collective kind);
const char* reduction_name(Reduction op);

struct CollectiveSpec {
  Collective kind = Collective::kAllReduce;
  int64_t group_size = 1;
  ElementType type = ElementType::kF32;
  // Per-replica element count of each input (several: a coalesced call, one
  // program for all of them).
  std::vector<int64_t> numels;
  Reduction reduction = Reduction::kSum;
  int64_t root = 0;  // kBroadcast

  // "all_reduce(sum) of f32[4] and f32[8] across 2 ranks"
  std::string describe() const;
  pjrt::Hash128 key() const;
  // Why this spec cannot be built (a bitwise reduction of floats, an average
  // of booleans, a root outside the group...), or empty when it can.
  std::string unsupported_reason() const;
};

// Declares the parameters (one flat input per numel, then for kPremulSum a
// 0-d factor of `type`), emits the collective and sets the outputs (one per
// input). Throws BuildError with unsupported_reason() when it is not empty.
void build_collective_program(Builder& b, const CollectiveSpec& spec);

// Per-replica output element count of input `i`.
int64_t collective_output_numel(const CollectiveSpec& spec, size_t i);

}  // namespace torch_pjrt::hlo
