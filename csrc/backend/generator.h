// The per-device random generator: a seed and an offset, advanced by every
// random op, so a seed reproduces a run and the state round-trips.
#pragma once

#include <ATen/core/Generator.h>

namespace torch_pjrt::backend {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);

}  // namespace torch_pjrt::backend
