// The per-device random generator: a seed and an offset, advanced by every
// random op, so a seed reproduces a run and the state round-trips.
#pragma once

#include <ATen/core/Generator.h>

#include "eager/execute.h"

namespace torch_pjrt::backend {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);

// The generator's (seed, offset) as a u64[2] buffer on `device` for one
// program that draws random numbers; the offset advances by one, so the
// next program draws fresh numbers and a seed replays them.
BufferPtr take_generator_state(at::Generator gen, int device);

}  // namespace torch_pjrt::backend
