// The c10d backend of the tpu device, registered with torch.distributed as
// "tpu": dist.init_process_group("tpu"), "cpu:gloo,tpu:tpu", or
// device_id=torch.device("tpu", i). Every entry point is turned into one
// CollectiveCall, checked on this rank, numbered, and run by the group's
// transport: XLA collective programs when every rank of the group lives in
// this process, the host transport (through gloo) otherwise.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "distributed/collective_call.h"
#include "distributed/transport.h"

namespace torch_pjrt::distributed {

class TpuBackend final : public c10d::Backend {
 public:
  // Makes the gloo group the host transport uses (in Python, where
  // ProcessGroupGloo is built): (store, rank, size, timeout) -> backend.
  using HostFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds)>;

  // Meets the other ranks through `store` to learn whether they all live in
  // this process, and picks the transport. Raises the store's timeout error
  // when a rank never comes.
  static c10::intrusive_ptr<TpuBackend> create(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               HostFactory make_host);

  TpuBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
             std::chrono::milliseconds timeout, std::unique_ptr<Transport> transport,
             HostFactory make_host);

  const std::string getBackendName() const override { return "tpu"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override { options_->timeout = timeout; }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  // Connections are made when the backend is created.
  void eagerConnectSingleDevice(at::Device) override {}

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // "xla" or "host".
  const char* transport_name() const { return transport_->name(); }

 private:
  c10::intrusive_ptr<c10d::Work> run(CollectiveCall call, c10d::OpType type,
                                     std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout_or_default(std::chrono::milliseconds t) const;
  hlo::Reduction reduction(const c10d::ReduceOp& op, const std::vector<at::Tensor>& tensors,
                           const char* name, double* factor) const;

  c10::intrusive_ptr<c10d::Store> store_;  // this group's own keys
  c10::intrusive_ptr<Options> options_;
  std::unique_ptr<Transport> transport_;
  uint64_t splits_ = 0;
  HostFactory make_host_;
  std::mutex mutex_;  // calls of one rank are numbered and issued in order
  uint64_t seq_ = 0;
};

}  // namespace torch_pjrt::distributed
