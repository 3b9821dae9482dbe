// Tensor types of StableHLO programs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pjrt/element_type.h"

namespace torch_pjrt::hlo {

using pjrt::ElementType;

struct TensorType {
  ElementType type = ElementType::kF32;
  std::vector<int64_t> dims;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  // "tensor<2x3xf32>"
  std::string mlir() const;
  bool operator==(const TensorType& o) const { return type == o.type && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

bool is_float(ElementType type);  // f16, bf16, f32, f64, f8
bool is_complex(ElementType type);
// The type of each part of a complex number: c64 -> f32, c128 -> f64.
ElementType complex_part(ElementType type);
bool is_signed_int(ElementType type);
bool is_unsigned_int(ElementType type);  // includes pred
bool is_integral(ElementType type);      // signed or unsigned, includes pred

}  // namespace torch_pjrt::hlo
