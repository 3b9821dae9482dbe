// Element types a buffer can hold, with the facts every layer needs about
// them: byte width, PJRT's enum, and the StableHLO spelling.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "pjrt/c_api.h"

namespace torch_pjrt::pjrt {

enum class ElementType {
  kPred,
  kS8,
  kS16,
  kS32,
  kS64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kC128,
  kF8E5M2,
  kF8E4M3FN,
};

size_t byte_width(ElementType type);
// "f32", "bf16", "i1" ... as StableHLO spells the element type.
std::string_view mlir_name(ElementType type);
PJRT_Buffer_Type to_pjrt(ElementType type);
std::optional<ElementType> from_pjrt(PJRT_Buffer_Type type);
std::optional<ElementType> from_mlir_name(std::string_view name);

}  // namespace torch_pjrt::pjrt
