// One collective on the host transport, as the two worker threads see it:
// the staged device buffers and host tensors, the pending device buffers
// the results fill, and the pieces the work is cut into. A piece waits for
// its copies to the host, starts its gloo operations, then (on the other
// thread) waits for them and fills its parts of the results. Large
// collectives are cut into several pieces so that copies and gloo overlap.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/event.h"
#include "pjrt/pending_buffer.h"

namespace torch_pjrt::distributed {

using Works = std::vector<c10::intrusive_ptr<c10d::Work>>;

struct HostPiece {
  std::vector<pjrt::Event> reads;  // copies to the host this piece needs
  std::function<Works()> start;    // starts its gloo operations
  std::function<void()> after;     // host work once they finished (an average)
  struct Fill {
    size_t pending;  // index into HostJob::pending
    const void* data;
    int64_t offset;
    int64_t size;
    bool last;  // completes the pending buffer
  };
  std::vector<Fill> fills;
};

struct HostJob {
  std::vector<std::shared_ptr<pjrt::Buffer>> sources;  // device buffers being read
  std::vector<pjrt::PendingBuffer> pending;            // result buffers, written into tensors
  std::vector<at::Tensor> pooled;                      // host tensors to give back
  std::vector<HostPiece> pieces;
  std::vector<pjrt::Event> filling;                    // fills still in flight
  std::atomic<bool> failed{false};  // set by whichever thread fails first
};

}  // namespace torch_pjrt::distributed
