#include "pjrt/compile_options.h"

#include "pjrt/error.h"

namespace torch_pjrt::pjrt {
namespace {

// Protobuf wire format: a key is (field_number << 3) | wire_type; wire type 0
// is a varint, 2 a length-delimited byte string.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_varint_field(std::string& out, int field, uint64_t value) {
  put_varint(out, (uint64_t(field) << 3) | 0);
  put_varint(out, value);
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (uint64_t(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// xla.DeviceAssignmentProto: replica_count (1), computation_count (2), and
// per computation (partition) the device of each replica (3 { 1: ids }).
std::string device_assignment_proto(const std::vector<std::vector<int64_t>>& assignment,
                                    int64_t replicas, int64_t partitions) {
  if (static_cast<int64_t>(assignment.size()) != replicas) {
    throw Error("CompileOptions::serialize", ErrorCode::kInvalidArgument,
                "device_assignment has " + std::to_string(assignment.size()) +
                    " replica(s), num_replicas is " + std::to_string(replicas));
  }
  std::string out;
  put_varint_field(out, /*replica_count=*/1, replicas);
  put_varint_field(out, /*computation_count=*/2, partitions);
  for (int64_t p = 0; p < partitions; ++p) {
    std::string ids;
    for (const auto& replica : assignment) {
      if (static_cast<int64_t>(replica.size()) != partitions) {
        throw Error("CompileOptions::serialize", ErrorCode::kInvalidArgument,
                    "every replica of device_assignment needs num_partitions (" +
                        std::to_string(partitions) + ") devices");
      }
      put_varint(ids, static_cast<uint64_t>(replica[p]));
    }
    std::string computation;
    put_bytes_field(computation, /*replica_device_ids (packed)=*/1, ids);
    put_bytes_field(out, /*computation_devices=*/3, computation);
  }
  return out;
}

}  // namespace

CompileOptions CompileOptions::replicated(const std::vector<int64_t>& device_ids) {
  CompileOptions options;
  options.num_replicas = static_cast<int64_t>(device_ids.size());
  options.portable = false;
  for (int64_t id : device_ids) options.device_assignment.push_back({id});
  return options;
}

std::string CompileOptions::serialize() const {
  std::string build_options;
  put_varint_field(build_options, /*num_replicas=*/4, num_replicas);
  put_varint_field(build_options, /*num_partitions=*/5, num_partitions);
  if (!device_assignment.empty()) {
    if (portable) {
      throw Error("CompileOptions::serialize", ErrorCode::kInvalidArgument,
                  "a portable executable cannot have a device assignment");
    }
    put_bytes_field(build_options, /*device_assignment=*/9,
                    device_assignment_proto(device_assignment, num_replicas, num_partitions));
  }

  std::string out;
  put_bytes_field(out, /*executable_build_options=*/3, build_options);
  if (portable) put_varint_field(out, /*compile_portable_executable=*/4, 1);
  return out;
}

}  // namespace torch_pjrt::pjrt
