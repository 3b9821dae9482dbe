#include "distributed/work.h"

#include <c10/util/Exception.h>

namespace torch_pjrt::distributed {

std::exception_ptr backend_error(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

void throw_backend_error(const std::string& message) {
  throw c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message);
}

TpuWork::TpuWork(int rank, c10d::OpType type, std::string label, std::vector<at::Tensor> outputs,
                 std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      label_(std::move(label)),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      // No devices: results are ordered by the PJRT buffers themselves, so
      // the future needs no device events.
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{})) {}

c10::intrusive_ptr<TpuWork> TpuWork::completed(int rank, c10d::OpType type, std::string label,
                                               std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<TpuWork>(rank, type, std::move(label), std::move(outputs),
                                           std::chrono::milliseconds(0));
  work->complete();
  return work;
}

void TpuWork::complete() {
  finish();
  future_->markCompleted(c10::IValue(outputs_));
}

void TpuWork::fail(std::exception_ptr error) {
  finish(error);
  future_->setErrorIfNeeded(error);
}

bool TpuWork::wait(std::chrono::milliseconds timeout) {
  std::chrono::milliseconds limit = timeout != kNoTimeout ? timeout : timeout_;
  std::unique_lock<std::mutex> lock(mutex_);
  bool done = limit.count() <= 0 ? (cv_.wait(lock, [&] { return completed_; }), true)
                                 : cv_.wait_for(lock, limit, [&] { return completed_; });
  if (!done) {
    lock.unlock();
    throw_backend_error("tpu backend: " + label_ + " on rank " + std::to_string(rank_) +
                        " did not complete within " + std::to_string(limit.count()) +
                        " ms (the group's timeout); a rank may have stopped, or called a "
                        "different collective");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> TpuWork::getFuture() { return future_; }

std::vector<at::Tensor> TpuWork::result() { return outputs_; }

}  // namespace torch_pjrt::distributed
