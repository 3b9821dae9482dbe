// torch dtypes <-> PJRT element types.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "pjrt/element_type.h"

namespace torch_pjrt::ops {

// Throws c10::TypeError naming the dtype when PJRT has no equivalent.
pjrt::ElementType to_element_type(c10::ScalarType type);
std::optional<pjrt::ElementType> maybe_element_type(c10::ScalarType type);
c10::ScalarType to_scalar_type(pjrt::ElementType type);

}  // namespace torch_pjrt::ops
