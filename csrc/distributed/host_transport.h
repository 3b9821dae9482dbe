// The transport for ranks in different processes on a plugin whose
// collectives cannot cross processes (the XLA CPU plugin): each input is
// copied device -> host once, the host tensors go through a gloo process
// group, and each result is copied host -> device once.
//
// Nothing blocks the caller: the copies to the host start at once, and the
// results' device buffers are PendingBuffers written into the output tensors
// right away (so later device work is ordered after the collective). Two
// threads per group do the host side in call order: one waits for the
// copies, checks that all ranks called the same thing and starts the gloo
// operation; the other waits for it to finish and fills the pending
// buffers. Starting is not held up by finishing, so a send and a receive
// posted by both sides of a ring both get under way. An error or a timeout
// fails the Work and the pending buffers, so whoever waits or reads raises
// instead of hanging.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/host_job.h"
#include "distributed/host_staging.h"
#include "distributed/serial_queue.h"
#include "distributed/transport.h"

namespace torch_pjrt::distributed {

class HostTransport : public Transport {
 public:
  HostTransport(c10::intrusive_ptr<c10d::Backend> host, int rank, int size);
  ~HostTransport() override;
  const char* name() const override { return "host"; }
  c10::intrusive_ptr<TpuWork> run(CollectiveCall& call, c10d::OpType type,
                                  std::chrono::milliseconds timeout) override;
  const c10::intrusive_ptr<c10d::Backend>& host() const { return host_; }

 private:
  // Queues `job` on the two threads; returns its Work.
  c10::intrusive_ptr<TpuWork> submit(const CollectiveCall& call, std::shared_ptr<HostJob> job,
                                     std::vector<at::Tensor> results, c10d::OpType type,
                                     std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Backend> host_;
  int rank_;
  int size_;
  HostStaging staging_;
  // Declared last: destroyed first, so their threads finish while the
  // members their jobs use are alive. Finishing outlives starting.
  SerialQueue finishing_;
  SerialQueue starting_;
};

}  // namespace torch_pjrt::distributed
