// The transport for ranks in different processes on a plugin whose
// collectives cannot cross processes (the XLA CPU plugin): each input is
// copied device -> host once, the host tensors go through a gloo process
// group, and each result is copied host -> device once.
//
// Nothing blocks the caller: the copies to the host start at once, the
// results' device buffers are PendingBuffers written into the output tensors
// right away (so later device work is ordered after the collective), and a
// worker thread per group runs the host side in call order: wait for the
// copies, check that all ranks called the same thing, run gloo, fill the
// pending buffers. An error or a timeout fails the Work and the pending
// buffers, so whoever waits or reads raises instead of hanging.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

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
  void enqueue(std::function<void()> job);
  void loop();

  c10::intrusive_ptr<c10d::Backend> host_;
  int rank_;
  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace torch_pjrt::distributed
