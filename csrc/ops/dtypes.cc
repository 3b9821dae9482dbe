#include "ops/dtypes.h"

#include <c10/util/Exception.h>

namespace torch_pjrt::ops {

using pjrt::ElementType;

std::optional<ElementType> maybe_element_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool: return ElementType::kPred;
    case c10::ScalarType::Char: return ElementType::kS8;
    case c10::ScalarType::Short: return ElementType::kS16;
    case c10::ScalarType::Int: return ElementType::kS32;
    case c10::ScalarType::Long: return ElementType::kS64;
    case c10::ScalarType::Byte: return ElementType::kU8;
    case c10::ScalarType::UInt16: return ElementType::kU16;
    case c10::ScalarType::UInt32: return ElementType::kU32;
    case c10::ScalarType::UInt64: return ElementType::kU64;
    case c10::ScalarType::Half: return ElementType::kF16;
    case c10::ScalarType::BFloat16: return ElementType::kBF16;
    case c10::ScalarType::Float: return ElementType::kF32;
    case c10::ScalarType::Double: return ElementType::kF64;
    case c10::ScalarType::ComplexFloat: return ElementType::kC64;
    case c10::ScalarType::ComplexDouble: return ElementType::kC128;
    case c10::ScalarType::Float8_e5m2: return ElementType::kF8E5M2;
    case c10::ScalarType::Float8_e4m3fn: return ElementType::kF8E4M3FN;
    default: return std::nullopt;
  }
}

ElementType to_element_type(c10::ScalarType type) {
  auto element = maybe_element_type(type);
  TORCH_CHECK_TYPE(element.has_value(), "torch_pjrt: dtype ", type,
                   " has no PJRT element type and cannot live on the device");
  return *element;
}

c10::ScalarType to_scalar_type(ElementType type) {
  switch (type) {
    case ElementType::kPred: return c10::ScalarType::Bool;
    case ElementType::kS8: return c10::ScalarType::Char;
    case ElementType::kS16: return c10::ScalarType::Short;
    case ElementType::kS32: return c10::ScalarType::Int;
    case ElementType::kS64: return c10::ScalarType::Long;
    case ElementType::kU8: return c10::ScalarType::Byte;
    case ElementType::kU16: return c10::ScalarType::UInt16;
    case ElementType::kU32: return c10::ScalarType::UInt32;
    case ElementType::kU64: return c10::ScalarType::UInt64;
    case ElementType::kF16: return c10::ScalarType::Half;
    case ElementType::kBF16: return c10::ScalarType::BFloat16;
    case ElementType::kF32: return c10::ScalarType::Float;
    case ElementType::kF64: return c10::ScalarType::Double;
    case ElementType::kC64: return c10::ScalarType::ComplexFloat;
    case ElementType::kC128: return c10::ScalarType::ComplexDouble;
    case ElementType::kF8E5M2: return c10::ScalarType::Float8_e5m2;
    case ElementType::kF8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
  }
  TORCH_CHECK(false, "torch_pjrt: unknown element type");
}

}  // namespace torch_pjrt::ops
