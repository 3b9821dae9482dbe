// Programs compiled once per key. The key is computed from what decides the
// program (op, dtypes, shapes, static attributes), so a cache hit builds no
// StableHLO text at all; the builder runs only on a miss. Each miss is
// counted with its reason, so a recompile storm can be explained.
#pragma once

#include <c10/util/ArrayRef.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/compile_options.h"
#include "pjrt/executable.h"
#include "pjrt/hash.h"

namespace torch_pjrt::backend {

// Accumulates a program key in three parts, so that a miss can say whether
// the op, a dtype, a shape or an attribute is what was new.
class ProgramKey {
 public:
  explicit ProgramKey(std::string_view op) : op_(op) {}
  ProgramKey& dtype(int64_t v) { dtypes_.add(static_cast<uint64_t>(v)); return *this; }
  ProgramKey& shape(int64_t v) { shapes_.add(static_cast<uint64_t>(v)); return *this; }
  ProgramKey& shape(c10::ArrayRef<int64_t> dims);
  ProgramKey& attr(uint64_t v) { attrs_.add(v); return *this; }
  ProgramKey& attr(std::string_view v) { attrs_.add(v); return *this; }
  const std::string& op() const { return op_; }
  // Overrides the recompile reason a miss records (compiled graphs know
  // better: "input 0 dim 1: 16 -> 32").
  ProgramKey& reason(std::string why) { reason_ = std::move(why); return *this; }
  const std::string& reason() const { return reason_; }
  pjrt::Hash128 dtypes() const { return dtypes_.finish(); }
  pjrt::Hash128 shapes() const { return shapes_.finish(); }
  pjrt::Hash128 attrs() const { return attrs_.finish(); }
  pjrt::Hash128 full() const;

 private:
  std::string op_;
  std::string reason_;
  pjrt::Hasher dtypes_, shapes_, attrs_;
};

// A program is built (StableHLO text) when its key is first seen and
// compiled when it is first run: fused eager inlines the text of the op
// programs it records into one larger program and never runs them alone.
struct Program {
  std::vector<hlo::TensorType> outputs;
  std::vector<hlo::TensorType> parameters;
  std::vector<bool> donated;  // per parameter, as compiled
  std::string op;    // what the key named ("aten::add.Tensor")
  std::string mlir;  // the module, as built
  pjrt::Hash128 key;
  // Compiles on the first call (recording the recompile reason then), and
  // again after the program was released (see release_least_recent_programs).
  std::shared_ptr<pjrt::Executable> executable() const;
  // Why this program was built (a new op signature, a changed dim).
  const std::string& reason() const { return reason_; }

 private:
  friend const Program& program_for(const ProgramKey&, const std::function<void(hlo::Builder&)>&,
                                    const pjrt::CompileOptions&);
  friend size_t release_least_recent_programs();
  pjrt::CompileOptions options_;
  std::string reason_;
  mutable std::mutex compile_mutex_;
  mutable std::shared_ptr<pjrt::Executable> executable_;
  mutable std::atomic<uint64_t> last_used_{0};
};

// Drops the executables of the least recently used half of the programs
// that hold one (a program compiles again, or loads from the disk cache, on
// its next run); returns how many were dropped. Called before a compile
// when the process nears the kernel's mapping limit (mapping_budget.h).
size_t release_least_recent_programs();
// Executables dropped that way since the counters were last reset.
int64_t programs_released();
// Adds executables released elsewhere (fused eager's graphs) to the count.
void count_programs_released(int64_t n);
void reset_programs_released();

// The program for `key`, building it with `build` on a miss. `build` gets a
// fresh builder named after the op, declares parameters and sets outputs.
const Program& program_for(const ProgramKey& key, const std::function<void(hlo::Builder&)>& build);
// The same for a program compiled with other options (a collective's device
// assignment). The key must cover whatever in `options` varies.
const Program& program_for(const ProgramKey& key, const std::function<void(hlo::Builder&)>& build,
                           const pjrt::CompileOptions& options);

// `op` with every character but letters and digits made '_': a module,
// function or file name ("aten::add.Tensor" -> "aten__add_Tensor").
std::string identifier(std::string_view op);

// Compiles `mlir` through the compile cache. With TORCH_PJRT_DUMP_DIR set
// the program is first written there as <name>-<hash>.mlir; a compile error
// names `what` and says where the program is (or how to keep it).
std::shared_ptr<pjrt::Executable> compile_program(const std::string& what, const std::string& name,
                                                  const std::string& mlir,
                                                  const pjrt::CompileOptions& options = {});

// Programs compiled for a pending fused graph are counted with their
// reason like any other ("fused graph: 312 ops").
void note_compile_reason(const std::string& reason);

// Calls answered by an already-built program (the hot path). Reported as
// part of metrics()["cache_hits_memory"].
int64_t program_hits();

// Reason -> count for every compile since the last reset, e.g.
// "new shape: aten::add.Tensor".
std::vector<std::pair<std::string, int64_t>> recompile_reasons();
void reset_recompile_reasons();

}  // namespace torch_pjrt::backend
