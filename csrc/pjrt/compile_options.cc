#include "pjrt/compile_options.h"

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

}  // namespace

std::string CompileOptions::serialize() const {
  std::string build_options;
  put_varint_field(build_options, /*num_replicas=*/4, num_replicas);
  put_varint_field(build_options, /*num_partitions=*/5, num_partitions);

  std::string out;
  put_bytes_field(out, /*executable_build_options=*/3, build_options);
  if (portable) put_varint_field(out, /*compile_portable_executable=*/4, 1);
  return out;
}

}  // namespace torch_pjrt::pjrt
