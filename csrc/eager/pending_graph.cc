#include "eager/pending_graph.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "eager/device_events.h"
#include "eager/fused_module.h"
#include "eager/loop_period.h"
#include "eager/mapping_budget.h"
#include "eager/program_cache.h"
#include "pjrt/error.h"
#include "pjrt/hash.h"

namespace torch_pjrt::eager {
namespace {

struct Node {
  const backend::Program* program = nullptr;
  std::vector<FusedRef> inputs;
  std::vector<std::weak_ptr<pjrt::Buffer>> outputs;
  // A compiled graph's results, held until a later launch reads them.
  std::vector<BufferPtr> pinned;
};

void flush_locked(int device, const std::string& why);

class Graph : public pjrt::DeferredSource {
 public:
  explicit Graph(int device) : device_(device) {}
  void materialize(const pjrt::Buffer&) override;

  int device_;
  std::vector<BufferPtr> params;
  std::unordered_map<const pjrt::Buffer*, int> param_index;
  std::unordered_map<const pjrt::Buffer*, FusedRef> produced;
  std::vector<Node> nodes;
  pjrt::Hasher key;
  std::vector<uint64_t> sequence;  // each node's program, for loop detection
};

// One lock for all devices' graphs: the autograd engine records backward ops
// from its own thread while the caller waits, and a flush on one device may
// materialize another device's input.
std::recursive_mutex mutex;
std::map<int, std::shared_ptr<Graph>> graphs;
std::map<int, size_t> loop_chunk;  // device -> ops per cut once a loop was seen
// The programs of the latest launches per device, across cuts (at most two
// caps' worth): where a loop's period is looked for.
std::map<int, std::deque<uint64_t>> history;
// Compiled graphs by key, with the time of their last launch: near the
// kernel's mapping limit the least recently launched half is released, as
// strict eager's programs are (program_cache.cc, mapping_budget.h).
struct FusedExecutable {
  std::shared_ptr<pjrt::Executable> exe;
  uint64_t last_used = 0;
};
std::unordered_map<pjrt::Hash128, FusedExecutable, pjrt::Hash128Hasher> executables;
uint64_t launch_clock = 0;

// Drops the least recently launched half of the compiled graphs, here and
// in the compile cache's memory; a graph seen again compiles again or loads
// from the disk cache. Launches in flight keep what they run alive.
void release_least_recent_graphs_locked() {
  std::vector<std::pair<uint64_t, pjrt::Hash128>> live;
  live.reserve(executables.size());
  for (const auto& [key, entry] : executables) live.emplace_back(entry.last_used, key);
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  live.resize(live.size() / 2);
  std::unordered_set<const pjrt::Executable*> gone;
  std::vector<std::shared_ptr<pjrt::Executable>> dropped;
  for (const auto& [stamp, key] : live) {
    auto it = executables.find(key);
    gone.insert(it->second.exe.get());
    dropped.push_back(std::move(it->second.exe));
    executables.erase(it);
  }
  backend::runtime().cache().release(gone);
  backend::count_programs_released(static_cast<int64_t>(dropped.size()));
}
FusedCounters counters;

void Graph::materialize(const pjrt::Buffer&) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  flush_locked(device_, "value read");
}

const std::shared_ptr<Graph>& graph_for(int device) {
  auto& g = graphs[device];
  if (!g) g = std::make_shared<Graph>(device);
  return g;
}

FusedRef param_ref(Graph& g, const BufferPtr& input) {
  auto [it, added] = g.param_index.try_emplace(input.get(), static_cast<int>(g.params.size()));
  if (added) g.params.push_back(input);
  return FusedRef{-1, it->second};
}

std::string describe(const Graph& g) {
  std::string first = g.nodes.front().program->op, last = g.nodes.back().program->op;
  return "pending graph of " + std::to_string(g.nodes.size()) + " launches (from " + first +
         " to " + last + ")";
}

void flush_locked(int device, const std::string& why) {
  auto found = graphs.find(device);
  if (found == graphs.end() || found->second->nodes.empty()) return;
  // Launches recorded while this one runs (none today) go to a new graph.
  std::shared_ptr<Graph> g = std::move(found->second);
  graphs.erase(found);
  counters.flushes[why]++;

  std::vector<FusedRef> outputs;
  std::vector<BufferPtr> targets;
  for (size_t n = 0; n < g->nodes.size(); ++n) {
    for (size_t i = 0; i < g->nodes[n].outputs.size(); ++i) {
      BufferPtr b = g->nodes[n].outputs[i].lock();
      if (b && b->is_deferred()) {
        outputs.push_back(FusedRef{static_cast<int>(n), static_cast<int>(i)});
        targets.push_back(std::move(b));
      }
    }
  }
  size_t cap = static_cast<size_t>(backend::settings().fused_max_ops);
  std::deque<uint64_t>& recent = history[device];
  recent.insert(recent.end(), g->sequence.begin(), g->sequence.end());
  while (recent.size() > 2 * cap) recent.pop_front();
  if (why == "size cap" || why == "loop period") {
    // Cut by size: if the recent launches repeat with a period of at most
    // the cap, cut every whole number of periods from now on, so every
    // later graph starts at the same point of the loop and is the same.
    size_t period = loop_period(std::vector<uint64_t>(recent.begin(), recent.end()));
    loop_chunk[device] = period > 0 && period <= cap ? period * (cap / period) : 0;
  }
  if (outputs.empty()) return;  // nothing anyone can observe

  // A parameter only this graph still holds (the old value of a tensor
  // updated in place) is donated: its memory can hold a result.
  std::vector<bool> donated(g->params.size());
  pjrt::Hasher key = g->key;
  key.add(static_cast<uint64_t>(outputs.size()));
  for (const FusedRef& r : outputs) key.add(static_cast<uint64_t>(r.node)).add(uint64_t(r.index));
  for (size_t i = 0; i < g->params.size(); ++i) {
    donated[i] = g->params[i].use_count() == 1;
    key.add(uint64_t{donated[i]});
  }
  pjrt::Hash128 full = key.finish();

  auto cached = executables.find(full);
  if (cached == executables.end()) {
    // A compile adds mappings; make room first if the process nears the
    // kernel's limit (strict eager's programs and these graphs alike).
    if (backend::mappings_under_pressure()) {
      backend::release_least_recent_programs();
      release_least_recent_graphs_locked();
    }
    std::vector<hlo::TensorType> param_types(g->params.size());
    std::vector<FusedCall> calls;
    for (const Node& node : g->nodes) {
      calls.push_back(FusedCall{node.program, node.inputs});
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i].node < 0) param_types[node.inputs[i].index] = node.program->parameters[i];
      }
    }
    std::string text;
    try {
      text = fused_module_text(param_types, donated, calls, outputs);
    } catch (const std::runtime_error& e) {
      TORCH_CHECK(false, "torch_pjrt: the ", describe(*g), " could not be built: ", e.what());
    }
    auto compiled = backend::compile_program(describe(*g), "fused_eager", text);
    counters.graphs_compiled++;
    backend::note_compile_reason("pending graph: " + std::to_string(g->nodes.size()) +
                                 " launches, run at " + why);
    cached = executables.emplace(full, FusedExecutable{std::move(compiled), 0}).first;
  }
  cached->second.last_used = ++launch_clock;
  std::shared_ptr<pjrt::Executable> exe = cached->second.exe;
  std::vector<const pjrt::Buffer*> raw;
  raw.reserve(g->params.size());
  for (const BufferPtr& p : g->params) raw.push_back(p.get());
  pjrt::ExecuteResult result;
  try {
    // Donated parameters are given up: the graph holds the last reference.
    result = exe->execute(raw, backend::runtime().client()->device(device), {});
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torch_pjrt: the ", describe(*g), " failed on the device: ", e.what());
  }
  g->params.clear();
  // Leaving fused mode runs the pending graph before the mode changes, so
  // this is never debug mode: nothing waits here.
  backend::track(device, std::move(result.done));
  for (size_t k = 0; k < targets.size(); ++k) targets[k]->fulfil(std::move(result.outputs[k]));
  counters.graphs_run++;
  counters.values_materialized += static_cast<int64_t>(targets.size());
}

}  // namespace

std::vector<BufferPtr> record(const backend::Program& program,
                              const std::vector<BufferPtr>& inputs, int device,
                              bool compiled_graph) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (compiled_graph) {
    auto it = graphs.find(device);
    if (it != graphs.end()) {
      const auto& nodes = it->second->nodes;
      if (std::any_of(nodes.begin(), nodes.end(),
                      [&](const Node& n) { return n.program == &program; })) {
        flush_locked(device, "compiled graph repeated");
      }
    }
  }
  {
    size_t chunk = loop_chunk[device];
    size_t limit = chunk ? chunk : static_cast<size_t>(backend::settings().fused_max_ops);
    auto it = graphs.find(device);
    if (it != graphs.end() && it->second->nodes.size() >= limit) {
      flush_locked(device, chunk ? "loop period" : "size cap");
    }
  }
  std::shared_ptr<Graph> self = graph_for(device);
  Graph& g = *self;
  Node node;
  node.program = &program;
  g.key.add(program.key.high).add(program.key.low);
  for (const BufferPtr& input : inputs) {
    FusedRef ref;
    auto p = input->is_deferred() ? g.produced.find(input.get()) : g.produced.end();
    if (p != g.produced.end() && g.nodes[p->second.node].outputs[p->second.index].lock() == input) {
      ref = p->second;
      auto& pinned = g.nodes[ref.node].pinned;
      if (!pinned.empty()) pinned[ref.index].reset();  // read here: an intermediate now
    } else {
      // A value another device's graph will produce is materialized first
      // (this runs that graph, never this one); it enters as a parameter.
      if (input->is_deferred()) input->raw();
      ref = param_ref(g, input);
    }
    g.key.add(static_cast<uint64_t>(ref.node + 1)).add(static_cast<uint64_t>(ref.index));
    node.inputs.push_back(ref);
  }
  std::vector<BufferPtr> results;
  auto& client = backend::runtime().client();
  int index = static_cast<int>(g.nodes.size());
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const hlo::TensorType& type = program.outputs[i];
    auto b = std::make_shared<pjrt::Buffer>(
        pjrt::Buffer::deferred(client, type.type, type.dims, self));
    node.outputs.push_back(b);
    if (compiled_graph) node.pinned.push_back(b);
    g.produced[b.get()] = FusedRef{index, static_cast<int>(i)};
    results.push_back(std::move(b));
  }
  g.nodes.push_back(std::move(node));
  g.sequence.push_back(program.key.low ^ (program.key.high * 31));
  counters.ops_recorded++;
  return results;
}

void flush(int device, const std::string& why) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (device >= 0) {
    flush_locked(device, why);
    return;
  }
  std::vector<int> devices;
  for (const auto& [d, g] : graphs) devices.push_back(d);
  for (int d : devices) flush_locked(d, why);
}

size_t pending_ops(int device) {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  auto it = graphs.find(device);
  return it == graphs.end() ? 0 : it->second->nodes.size();
}

FusedCounters fused_counters() {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  return counters;
}

void reset_fused_counters() {
  std::lock_guard<std::recursive_mutex> lock(mutex);
  counters = FusedCounters{};
}

}  // namespace torch_pjrt::eager
