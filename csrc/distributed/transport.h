// How a tpu process group moves data. One backend, two transports:
// XlaTransport (every rank of the group in this process, one device each:
// XLA collective programs over a device assignment) and HostTransport
// (ranks in several processes on a plugin that cannot cross processes:
// device -> host -> gloo -> device, one copy each way).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>

#include "distributed/collective_call.h"
#include "distributed/work.h"

namespace torch_pjrt::distributed {

class Transport {
 public:
  virtual ~Transport() = default;
  // "xla" or "host", as torch_pjrt.distributed reports it.
  virtual const char* name() const = 0;
  // Runs one checked call of this rank. The returned Work completes when the
  // outputs hold the results, or when the device's own ordering guarantees
  // that every later reader sees them.
  virtual c10::intrusive_ptr<TpuWork> run(CollectiveCall& call, c10d::OpType type,
                                          std::chrono::milliseconds timeout) = 0;
};

}  // namespace torch_pjrt::distributed
