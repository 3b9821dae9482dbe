// Module.to("tpu") and `param.data = t` keep a Parameter's identity only when
// torch deems the old and new tensor types shallow-copy compatible. Torch's
// own rule lists the in-tree dense backends (CPU, CUDA, ...) and never
// PrivateUse1, so moving a module would replace each Parameter by a new one
// and untie tied weights (an embedding shared with the output layer). tpu
// tensors are plain strided TensorImpls, like CPU and CUDA ones: a dense
// tensor of either kind may take the other's metadata, as CUDA's may.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_pjrt::backend {
namespace {

bool is_dense_cpu_or_tpu(const at::Tensor& t) {
  return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone()) &&
         !t.is_quantized() && !t.is_nested();
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (is_dense_cpu_or_tpu(self) && is_dense_cpu_or_tpu(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace
}  // namespace torch_pjrt::backend
