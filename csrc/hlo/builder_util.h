// Text helpers shared by the files that define Builder's ops (builder.cc,
// structured_ops.cc). Internal to csrc/hlo.
#pragma once

#include <string>
#include <vector>

#include "hlo/builder.h"

namespace torch_pjrt::hlo::builder_util {

inline std::string join(const std::vector<int64_t>& xs, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(xs[i]);
  }
  return out;
}

// array<i64: 1, 2>, the form of dense i64 array attributes.
inline std::string i64_array(const std::vector<int64_t>& xs) {
  return xs.empty() ? "array<i64>" : "array<i64: " + join(xs) + ">";
}

inline std::string dims_list(const std::vector<int64_t>& xs) { return "[" + join(xs) + "]"; }

inline std::string describe(const TensorType& t) { return t.mlir(); }

[[noreturn]] inline void fail(const std::string& op, const std::string& why) {
  throw BuildError("stablehlo." + op + ": " + why);
}

inline void check_dims_in_range(const std::string& op, const std::vector<int64_t>& dims,
                                int64_t rank) {
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      fail(op, "dimension " + std::to_string(d) + " out of range for rank " + std::to_string(rank));
    }
  }
}

}  // namespace torch_pjrt::hlo::builder_util
