// Cutting the big, elementwise collectives (all_reduce, reduce, broadcast,
// all_gather_into_tensor, reduce_scatter_tensor) of the host transport into
// pieces of a few MiB, so that copying piece k+1 to the host, gloo on piece
// k and filling piece k-1 on the device overlap. Still one copy each way:
// pieces of the device buffers are read and written in place
// (PJRT_Buffer_CopyRawToHost, TransferData at an offset), which needs a
// device layout equal to the dense row-major one: the CPU plugin's.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/collective_call.h"
#include "distributed/host_job.h"
#include "distributed/host_staging.h"

namespace torch_pjrt::distributed {

// Bytes per piece.
constexpr int64_t kPieceBytes = int64_t{4} << 20;

// Whether `call` is cut into pieces on this plugin.
bool pipelines(const CollectiveCall& call);

// Fills `job` for `call`: stages the copies, writes the pending result
// buffers into the output tensors, and adds the pieces. Returns the tensors
// the Work reports as its result.
std::vector<at::Tensor> build_pipeline(const CollectiveCall& call, int rank, int size,
                                       const c10::intrusive_ptr<c10d::Backend>& gloo,
                                       HostStaging& staging, HostJob& job);

}  // namespace torch_pjrt::distributed
