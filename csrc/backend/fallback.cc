#include "backend/fallback.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <map>
#include <optional>
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

bool is_index_list(const c10::TypePtr& type) {
  auto list = type->castRaw<c10::ListType>();
  if (list == nullptr) return false;
  auto opt = list->getElementType()->castRaw<c10::OptionalType>();
  return opt != nullptr && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}

// The tensors a fallback reads and writes must live where a tpu kernel
// would accept them: one tpu device, and nothing written on the CPU (the
// result could not be copied back there). Raise as a device kernel would.
void check_devices(const c10::OperatorHandle& op, const std::string& name,
                   const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  size_t first = stack.size() - args.size();
  std::optional<c10::Device> tpu, cpu_operand;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    std::vector<at::Tensor> tensors;
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) tensors.push_back(t);
    }
    bool written = args[i].alias_info() && args[i].alias_info()->isWrite();
    for (const at::Tensor& t : tensors) {
      if (!t.defined()) continue;
      c10::Device d = t.device();
      if (d.type() == c10::DeviceType::PrivateUse1) {
        TORCH_CHECK(!tpu || *tpu == d, "Expected all tensors to be on the same device, but found ",
                    "at least two devices, ", tpu->str(), " and ", d.str(), "! (when checking ",
                    "argument '", args[i].name(), "' of ", name, ")");
        tpu = d;
      } else if (written) {
        TORCH_CHECK(false, "Expected all tensors to be on the same device: ", name,
                    " would write its result into argument '", args[i].name(), "' on ", d.str(),
                    " while other arguments are on tpu");
      } else if (t.dim() > 0 && !is_index_list(args[i].type())) {
        // A CPU scalar is fine, as with CUDA kernels, and so are CPU index
        // tensors of advanced indexing (Tensor?[] indices).
        cpu_operand = cpu_operand ? cpu_operand : std::optional<c10::Device>(d);
      }
    }
  }
  TORCH_CHECK(!tpu || !cpu_operand, "Expected all tensors to be on the same device, but found at ",
              "least two devices, ", cpu_operand ? cpu_operand->str() : "", " and ",
              tpu ? tpu->str() : "", "! (when checking arguments for ", name, ")");
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = name_of(op);
  check_devices(op, name, *stack);
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
