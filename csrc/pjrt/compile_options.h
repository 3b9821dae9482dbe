// The compile options a PJRT plugin takes, as the serialized
// xla.CompileOptionsProto it expects. We set a handful of fields, so the
// protobuf wire format is written directly and no protobuf library is needed.
#pragma once

#include <cstdint>
#include <string>

namespace torch_pjrt::pjrt {

struct CompileOptions {
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  // A portable executable is compiled once and runs on any device of the
  // client (chosen per execution). Eager mode relies on this: one cached
  // executable per op serves every device.
  bool portable = true;

  // CompileOptionsProto bytes: executable_build_options (field 3) holding
  // num_replicas (4) and num_partitions (5), and compile_portable_executable (4).
  std::string serialize() const;
};

}  // namespace torch_pjrt::pjrt
