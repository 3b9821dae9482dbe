// Fused eager mode's pending graph: while TORCH_PJRT_EAGER=fused (or
// torch_pjrt.set_eager_mode("fused")), the launches strict eager would make
// are recorded per device instead; compiled torch.compile graphs are
// recorded in strict mode too. Each result is a deferred buffer with its
// type and dims known; the graph runs as one program the first time
// anything needs a deferred buffer's contents (a copy to the host, .item(),
// a strict-mode launch or a collective reading it), at synchronize(), at
// the end of an optimizer step, or when it reaches its size cap. Only the values
// that something still holds become outputs of that program: intermediates
// nobody kept are never materialized.
//
// The same step recorded again is the same program: the graph's key is the
// sequence of op programs and how they are wired, so a training or decode
// loop compiles once. A loop with no sync point inside is cut at a multiple
// of its period (found at the first cut by size), so every cut after the
// first looks the same.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "eager/program_cache.h"
#include "pjrt/buffer.h"

namespace torch_pjrt::eager {

using BufferPtr = std::shared_ptr<pjrt::Buffer>;

// Records a launch of `program` on `device`; returns its results, deferred.
// A `compiled_graph` (a torch.compile graph, backend/graph.cc) is work the
// user asked for: its results are computed even if nothing holds them,
// unless a later launch in the same pending graph reads them; and a graph
// already pending runs before it is recorded again (a loop runs per
// iteration instead of inlining every iteration into one program).
std::vector<BufferPtr> record(const backend::Program& program,
                              const std::vector<BufferPtr>& inputs, int device,
                              bool compiled_graph = false);

// Runs the pending graph of `device` (-1: every device) as one program.
// `why` is counted in fused_counters().flushes.
void flush(int device, const std::string& why);

// Launches waiting in `device`'s pending graph.
size_t pending_ops(int device);

struct FusedCounters {
  int64_t ops_recorded = 0;
  int64_t graphs_run = 0;
  int64_t graphs_compiled = 0;
  int64_t values_materialized = 0;  // graph outputs: values something still held
  std::map<std::string, int64_t> flushes;  // why -> count
};
FusedCounters fused_counters();
void reset_fused_counters();

}  // namespace torch_pjrt::eager
