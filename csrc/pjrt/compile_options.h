// The compile options a PJRT plugin takes, as the serialized
// xla.CompileOptionsProto it expects. We set a handful of fields, so the
// protobuf wire format is written directly and no protobuf library is needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_pjrt::pjrt {

struct CompileOptions {
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  // A portable executable is compiled once and runs on any device of the
  // client (chosen per execution). Eager mode relies on this: one cached
  // executable per op serves every device.
  bool portable = true;
  // A fixed placement for a program that runs on several devices at once (a
  // collective): device_assignment[replica][partition] is a PJRT device id.
  // Empty for a single-device program. Needs portable = false.
  std::vector<std::vector<int64_t>> device_assignment;

  // A collective program for `device_ids`, one replica each.
  static CompileOptions replicated(const std::vector<int64_t>& device_ids);

  // CompileOptionsProto bytes: executable_build_options (field 3) holding
  // num_replicas (4), num_partitions (5) and device_assignment (9), and
  // compile_portable_executable (4). Throws Error (kInvalidArgument) for an
  // assignment that does not match the replica and partition counts.
  std::string serialize() const;
};

}  // namespace torch_pjrt::pjrt
