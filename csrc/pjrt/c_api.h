// The one include of the PJRT C API header for the runtime. The header is
// fetched at build time from a pinned package (tools/fetch_pjrt_header.py) and
// never committed; every other file includes this one.
#pragma once

#include "xla/pjrt/c/pjrt_c_api.h"

namespace torch_pjrt::pjrt {

// Fills the two fields every PJRT argument struct starts with.
template <typename Args>
Args make_args(size_t struct_size) {
  Args args{};
  args.struct_size = struct_size;
  args.extension_start = nullptr;
  return args;
}

}  // namespace torch_pjrt::pjrt

#define TORCH_PJRT_ARGS(type) ::torch_pjrt::pjrt::make_args<type>(type##_STRUCT_SIZE)
