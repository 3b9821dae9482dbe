// The Work a tpu collective returns: owns its completion, its error and its
// result tensors. wait() never blocks past the group's timeout: a collective
// that has not completed by then raises DistBackendError naming the call.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace torch_pjrt::distributed {

class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, c10d::OpType type, std::string label, std::vector<at::Tensor> outputs,
          std::chrono::milliseconds timeout);

  // A Work that is already complete (the transport finished on the calling
  // thread, or the device orders the rest).
  static c10::intrusive_ptr<TpuWork> completed(int rank, c10d::OpType type, std::string label,
                                                std::vector<at::Tensor> outputs);

  // Called once by the transport, from any thread.
  void complete();
  void fail(std::exception_ptr error);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  const std::string& label() const { return label_; }

 private:
  std::string label_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A DistBackendError (torch.distributed.DistBackendError in Python).
std::exception_ptr backend_error(const std::string& message);
[[noreturn]] void throw_backend_error(const std::string& message);

}  // namespace torch_pjrt::distributed
