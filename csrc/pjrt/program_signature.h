// The parameter types of a StableHLO program's entry function, read from its
// MLIR text. Plugins do not all check argument types at execution (the XLA
// CPU plugin reinterprets the bytes), so Executable checks them against this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pjrt/element_type.h"

namespace torch_pjrt::pjrt {

struct TensorSpec {
  ElementType type;
  std::vector<int64_t> dims;  // -1 for a dynamic dimension

  bool matches(ElementType other_type, const std::vector<int64_t>& other_dims) const;
  // "f32[2,3]"
  std::string to_string() const;
  static std::string to_string(ElementType type, const std::vector<int64_t>& dims);
};

// Parameters of `func.func public @main`, or nullopt when the text has no
// recognisable main function or uses types this parser does not know (the
// caller then skips the check rather than guess).
std::optional<std::vector<TensorSpec>> parse_main_signature(std::string_view mlir);

}  // namespace torch_pjrt::pjrt
