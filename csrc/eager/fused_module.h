// The text of one fused program: the op programs fused eager recorded, each
// kept as a private function, called in recording order from @main. XLA
// inlines the calls and fuses across what were separate launches; the op
// lowerings are the ones strict eager runs, with no second implementation.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "eager/program_cache.h"
#include "hlo/types.h"

namespace torch_pjrt::eager {

// A value in the fused program: parameter `index` when `node` < 0, else
// result `index` of call `node`.
struct FusedRef {
  int node = -1;
  int index = 0;
};

struct FusedCall {
  const backend::Program* program = nullptr;
  std::vector<FusedRef> inputs;  // one per program parameter
};

// The module: @main takes `params` (a donor where `donated` says so) and
// returns `outputs`.
std::string fused_module_text(const std::vector<hlo::TensorType>& params,
                              const std::vector<bool>& donated,
                              const std::vector<FusedCall>& calls,
                              const std::vector<FusedRef>& outputs);

// An op program's module text as a private function named `name`: the
// module wrapper and donation marks go (only @main's parameters are donated).
std::string as_private_function(const std::string& module_text, const std::string& name);

// The external functions (kernels) an op program's module defines after
// @main: (symbol, definitions) in order of first call.
std::vector<std::pair<std::string, std::string>> external_functions(
    const std::string& module_text);

}  // namespace torch_pjrt::eager
