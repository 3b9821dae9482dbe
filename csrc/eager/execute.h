// Launching programs from the backend: the one place that knows the eager
// mode (debug waits after each program so errors surface at their op) and
// keeps the completion events torch.tpu.synchronize() waits on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "eager/device_events.h"
#include "eager/program_cache.h"
#include "pjrt/buffer.h"

namespace torch_pjrt::backend {

using BufferPtr = std::shared_ptr<pjrt::Buffer>;

// Runs `program` on `device`. Parameters compiled as donated are given up
// only when `inputs[i]` is held by nobody else (use_count 1 at the caller),
// which the caller signals through `may_donate`. In fused eager mode a
// `fusable` launch is recorded into the pending graph instead (see
// eager/pending_graph.h). Compiled torch.compile graphs record themselves
// there in strict mode too (backend/graph.cc) and call this only in debug.
std::vector<BufferPtr> run_program(const Program& program, const std::vector<BufferPtr>& inputs,
                                   int device, const std::vector<bool>& may_donate = {},
                                   bool fusable = true);

// A 0-d device buffer holding `value` converted to `type`; recently used
// values are reused, so a changing learning rate costs one small copy.
BufferPtr scalar_buffer(int device, pjrt::ElementType type, double value);
BufferPtr scalar_buffer_int(int device, pjrt::ElementType type, int64_t value);
// A complex64 or complex128 scalar.
BufferPtr scalar_buffer_complex(int device, pjrt::ElementType type, double re, double im);

// Runs the pending fused graphs, then waits for every program and copy
// launched so far on `device` (-1: all).
void synchronize(int device);

// Counts a point where the host waited for device data (.item(), a copy to
// the host, a mask turned into indices). metrics()["host_syncs"].
void note_host_sync();
int64_t host_syncs();
void reset_host_syncs();

// A data-dependent condition a program computed (an i1 scalar); checked when
// the host next waits for the device. Raises IndexError with `message`, or
// RuntimeError when `index_error` is false.
void defer_check(BufferPtr ok, std::string message, bool index_error = true);
// What the elements of a pred[N] check buffer mean: element i raises
// `messages[i]`, as IndexError when `index_errors[i]`, else RuntimeError.
struct CheckMessages {
  std::vector<std::string> messages;
  std::vector<bool> index_errors;
};
// Several conditions in one pred[N] buffer (a compiled graph's checks); the
// messages are built once per graph and shared by every call. One read
// covers them all.
void defer_checks(BufferPtr ok, std::shared_ptr<const CheckMessages> meaning);
// Reads every deferred condition; raises the first that failed.
void raise_failed_checks();

}  // namespace torch_pjrt::backend
