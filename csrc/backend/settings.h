// The settings the C++ side needs, pushed from the Python settings table at
// import (Python reads the environment once; C++ never does).
#pragma once

#include <string>

namespace torch_pjrt::backend {

enum class EagerMode { kStrict, kDebug, kFused };
enum class FallbackMode { kAllow, kWarn, kError };

struct BackendSettings {
  EagerMode eager = EagerMode::kStrict;
  FallbackMode fallback = FallbackMode::kWarn;
  // Every compiled program is written here (and named in compile errors).
  std::string dump_dir;
  // Fused eager: launches a pending graph holds before it runs anyway.
  int fused_max_ops = 1024;
};

const BackendSettings& settings();
void set_settings(const BackendSettings& s);

}  // namespace torch_pjrt::backend
