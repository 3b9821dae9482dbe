#include "hlo/types.h"

namespace torch_pjrt::hlo {

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::mlir() const {
  std::string out = "tensor<";
  for (int64_t d : dims) out += std::to_string(d) + "x";
  out += pjrt::mlir_name(type);
  return out + ">";
}

bool is_float(ElementType t) {
  switch (t) {
    case ElementType::kF16:
    case ElementType::kBF16:
    case ElementType::kF32:
    case ElementType::kF64:
    case ElementType::kF8E5M2:
    case ElementType::kF8E4M3FN:
      return true;
    default:
      return false;
  }
}

bool is_complex(ElementType t) { return t == ElementType::kC64 || t == ElementType::kC128; }

ElementType complex_part(ElementType t) {
  return t == ElementType::kC128 ? ElementType::kF64 : ElementType::kF32;
}

bool is_signed_int(ElementType t) {
  return t == ElementType::kS8 || t == ElementType::kS16 || t == ElementType::kS32 ||
         t == ElementType::kS64;
}

bool is_unsigned_int(ElementType t) {
  return t == ElementType::kPred || t == ElementType::kU8 || t == ElementType::kU16 ||
         t == ElementType::kU32 || t == ElementType::kU64;
}

bool is_integral(ElementType t) { return is_signed_int(t) || is_unsigned_int(t); }

}  // namespace torch_pjrt::hlo
