#include "backend/fallback.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <set>

#include "backend/settings.h"

namespace torch_pjrt::backend {
namespace {

std::mutex mutex;
std::map<std::string, int64_t> counts;
std::set<std::string> warned;

std::string name_of(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  return schema.overload_name().empty() ? schema.name()
                                        : schema.name() + "." + schema.overload_name();
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = name_of(op);
  FallbackMode mode = settings().fallback;
  TORCH_CHECK_NOT_IMPLEMENTED(
      mode != FallbackMode::kError, "torch_pjrt: ", name,
      " has no tpu lowering and TORCH_PJRT_FALLBACK=error forbids running it on the CPU");
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    counts[name]++;
    first = warned.insert(name).second;
  }
  if (first && mode == FallbackMode::kWarn) {
    TORCH_WARN("torch_pjrt: ", name,
               " has no tpu lowering; it runs on the CPU with copies both ways (counted in "
               "torch_pjrt.metrics()['fallback_ops']; TORCH_PJRT_FALLBACK=error makes this an "
               "error)");
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(mutex);
  return {counts.begin(), counts.end()};
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(mutex);
  counts.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace torch_pjrt::backend
