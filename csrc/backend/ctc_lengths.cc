// CTC loss in eager mode with int[] lengths (what F.ctc_loss calls, even
// with length tensors, after reading them on the host): the lengths go to
// the device as data and the Tensor-lengths forms of _ctc_loss and
// _ctc_loss_backward run. Lengths change with every batch of a training
// loop; as program constants they would compile a new program per batch,
// as data they reuse one per shape. The CPU's checks run here first, on the
// host values, with its messages.
#include <ATen/ops/_ctc_loss.h>
#include <ATen/ops/_ctc_loss_backward.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <vector>

#include "ops/ctc_loss.h"

namespace torch_pjrt::backend {
namespace {

at::Tensor on_device(at::IntArrayRef values, const at::Device& device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
}

void check(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef il, at::IntArrayRef tl) {
  // Shapes the lowering checks itself (ranks, dtypes) are left to it.
  if (log_probs.dim() != 3 || targets.dim() < 1 || targets.dim() > 2) return;
  ops::check_ctc_lengths(log_probs.size(0), log_probs.size(1), targets.sizes().vec(), il.vec(), tl.vec());
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                            at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                                            int64_t blank, bool zero_infinity) {
  check(log_probs, targets, input_lengths, target_lengths);
  return at::_ctc_loss(log_probs, targets, on_device(input_lengths, log_probs.device()),
                       on_device(target_lengths, log_probs.device()), blank, zero_infinity);
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                             const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                             bool zero_infinity) {
  check(log_probs, targets, input_lengths, target_lengths);
  return at::_ctc_loss_backward(grad, log_probs, targets, on_device(input_lengths, log_probs.device()),
                                on_device(target_lengths, log_probs.device()), neg_log_likelihood, log_alpha,
                                blank, zero_infinity);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_ctc_loss", ctc_loss);
  m.impl("_ctc_loss_backward", ctc_loss_backward);
}

}  // namespace
}  // namespace torch_pjrt::backend
