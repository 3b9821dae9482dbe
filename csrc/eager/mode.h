// Switching the eager mode while the program runs
// (torch_pjrt.set_eager_mode and the eager_mode() context manager).
#pragma once

#include "backend/settings.h"

namespace torch_pjrt::eager {

// Leaving fused mode runs the pending graphs first, so no launch recorded
// under fused mode waits behind ones that run at once.
void set_eager_mode(backend::EagerMode mode);

}  // namespace torch_pjrt::eager
