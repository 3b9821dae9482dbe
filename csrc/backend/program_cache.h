// Programs compiled once per key. The key is computed from what decides the
// program (op, dtypes, shapes, static attributes), so a cache hit builds no
// StableHLO text at all; the builder runs only on a miss. Each miss is
// counted with its reason, so a recompile storm can be explained.
#pragma once

#include <c10/util/ArrayRef.h>

#include <functional>
#include <memory>
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

struct Program {
  std::shared_ptr<pjrt::Executable> executable;
  std::vector<hlo::TensorType> outputs;
  std::vector<hlo::TensorType> parameters;
  std::vector<bool> donated;  // per parameter, as compiled
};

// The program for `key`, building it with `build` on a miss. `build` gets a
// fresh builder named after the op, declares parameters and sets outputs.
const Program& program_for(const ProgramKey& key, const std::function<void(hlo::Builder&)>& build);
// The same for a program compiled with other options (a collective's device
// assignment). The key must cover whatever in `options` varies.
const Program& program_for(const ProgramKey& key, const std::function<void(hlo::Builder&)>& build,
                           const pjrt::CompileOptions& options);

// Calls answered by an already-built program (the hot path). Reported as
// part of metrics()["cache_hits_memory"].
int64_t program_hits();

// Reason -> count for every compile since the last reset, e.g.
// "new shape: aten::add.Tensor".
std::vector<std::pair<std::string, int64_t>> recompile_reasons();
void reset_recompile_reasons();

}  // namespace torch_pjrt::backend
