#include "pjrt/element_type.h"

namespace torch_pjrt::pjrt {
namespace {

struct TypeInfo {
  ElementType type;
  PJRT_Buffer_Type pjrt;
  size_t bytes;
  std::string_view mlir;
};

// Unsigned integers are spelled ui8.. in StableHLO; signless i8.. are signed.
constexpr TypeInfo kTypes[] = {
    {ElementType::kPred, PJRT_Buffer_Type_PRED, 1, "i1"},
    {ElementType::kS8, PJRT_Buffer_Type_S8, 1, "i8"},
    {ElementType::kS16, PJRT_Buffer_Type_S16, 2, "i16"},
    {ElementType::kS32, PJRT_Buffer_Type_S32, 4, "i32"},
    {ElementType::kS64, PJRT_Buffer_Type_S64, 8, "i64"},
    {ElementType::kU8, PJRT_Buffer_Type_U8, 1, "ui8"},
    {ElementType::kU16, PJRT_Buffer_Type_U16, 2, "ui16"},
    {ElementType::kU32, PJRT_Buffer_Type_U32, 4, "ui32"},
    {ElementType::kU64, PJRT_Buffer_Type_U64, 8, "ui64"},
    {ElementType::kF16, PJRT_Buffer_Type_F16, 2, "f16"},
    {ElementType::kBF16, PJRT_Buffer_Type_BF16, 2, "bf16"},
    {ElementType::kF32, PJRT_Buffer_Type_F32, 4, "f32"},
    {ElementType::kF64, PJRT_Buffer_Type_F64, 8, "f64"},
    {ElementType::kC64, PJRT_Buffer_Type_C64, 8, "complex<f32>"},
    {ElementType::kC128, PJRT_Buffer_Type_C128, 16, "complex<f64>"},
    {ElementType::kF8E5M2, PJRT_Buffer_Type_F8E5M2, 1, "f8E5M2"},
    {ElementType::kF8E4M3FN, PJRT_Buffer_Type_F8E4M3FN, 1, "f8E4M3FN"},
};

const TypeInfo& info(ElementType type) { return kTypes[static_cast<int>(type)]; }

}  // namespace

size_t byte_width(ElementType type) { return info(type).bytes; }
std::string_view mlir_name(ElementType type) { return info(type).mlir; }
PJRT_Buffer_Type to_pjrt(ElementType type) { return info(type).pjrt; }

std::optional<ElementType> from_pjrt(PJRT_Buffer_Type type) {
  for (const TypeInfo& t : kTypes) {
    if (t.pjrt == type) return t.type;
  }
  return std::nullopt;
}

std::optional<ElementType> from_mlir_name(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (t.mlir == name) return t.type;
  }
  return std::nullopt;
}

}  // namespace torch_pjrt::pjrt
