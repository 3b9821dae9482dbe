#include "backend/settings.h"

namespace torch_pjrt::backend {
namespace {
BackendSettings current;
}

const BackendSettings& settings() { return current; }
void set_settings(const BackendSettings& s) { current = s; }

}  // namespace torch_pjrt::backend
