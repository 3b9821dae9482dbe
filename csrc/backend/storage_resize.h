#pragma once

#include <c10/core/Storage.h>

namespace torch_pjrt::backend {

// Grows or shrinks a tpu storage to `nbytes`, keeping the leading contents;
// new bytes read as zeros.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace torch_pjrt::backend
