#include "eager/program_cache.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "eager/mapping_budget.h"
#include "pjrt/program_signature.h"

namespace torch_pjrt::backend {
namespace {

struct OpHistory {
  std::set<std::pair<uint64_t, uint64_t>> dtypes, shapes, attrs;
};

std::mutex mutex;
std::unordered_map<pjrt::Hash128, std::unique_ptr<Program>, pjrt::Hash128Hasher> programs;
std::map<std::string, OpHistory> history;
std::map<std::string, int64_t> reasons;
std::atomic<int64_t> hits{0};
std::atomic<uint64_t> use_clock{0};
std::atomic<int64_t> released{0};

std::pair<uint64_t, uint64_t> pair_of(const pjrt::Hash128& h) { return {h.high, h.low}; }

std::string reason_for(const ProgramKey& key) {
  auto [it, new_op] = history.try_emplace(key.op());
  OpHistory& h = it->second;
  bool new_dtype = h.dtypes.insert(pair_of(key.dtypes())).second;
  bool new_shape = h.shapes.insert(pair_of(key.shapes())).second;
  bool new_attrs = h.attrs.insert(pair_of(key.attrs())).second;
  const char* why = new_op      ? "new op"
                    : new_dtype ? "new dtype"
                    : new_shape ? "new shape"
                    : new_attrs ? "new attributes"
                                : "new combination";
  return std::string(why) + ": " + key.op();
}

}  // namespace

std::string identifier(std::string_view op) {
  std::string name;
  for (char c : op) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

namespace {

// With TORCH_PJRT_DUMP_DIR set every program is written before it is
// compiled; a compile error says where, or how to keep the program.
std::string dump_program(const std::string& name, const std::string& mlir) {
  const std::string& dir = settings().dump_dir;
  if (dir.empty()) return "set TORCH_PJRT_DUMP_DIR to keep the failing program";
  std::string path = dir + "/" + name + "-" + pjrt::hash128(mlir).hex() + ".mlir";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "could not write the program to " + path;
  std::fwrite(mlir.data(), 1, mlir.size(), f);
  std::fclose(f);
  return "the program was written to " + path;
}

}  // namespace

std::shared_ptr<pjrt::Executable> compile_program(const std::string& what, const std::string& name,
                                                  const std::string& mlir,
                                                  const pjrt::CompileOptions& options) {
  std::string dumped = settings().dump_dir.empty() ? "" : dump_program(name, mlir);
  try {
    return runtime().cache().get_or_compile(mlir, options).executable;
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torch_pjrt: the StableHLO program for ", what, " failed to compile: ",
                e.what(), " (", dumped.empty() ? dump_program(name, mlir) : dumped, ")");
  }
}

ProgramKey& ProgramKey::shape(c10::ArrayRef<int64_t> dims) {
  shapes_.add(static_cast<uint64_t>(dims.size()));
  for (int64_t d : dims) shapes_.add(static_cast<uint64_t>(d));
  return *this;
}

pjrt::Hash128 ProgramKey::full() const {
  auto d = dtypes(), s = shapes(), a = attrs();
  return pjrt::Hasher()
      .add(op_)
      .add(d.high).add(d.low)
      .add(s.high).add(s.low)
      .add(a.high).add(a.low)
      .finish();
}

const Program& program_for(const ProgramKey& key,
                           const std::function<void(hlo::Builder&)>& build) {
  return program_for(key, build, pjrt::CompileOptions{});
}

const Program& program_for(const ProgramKey& key, const std::function<void(hlo::Builder&)>& build,
                           const pjrt::CompileOptions& options) {
  pjrt::Hash128 full = key.full();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = programs.find(full); it != programs.end()) {
      hits++;
      return *it->second;
    }
  }
  hlo::Builder builder(identifier(key.op()));
  build(builder);
  auto program = std::make_unique<Program>();
  program->mlir = builder.to_mlir();
  program->op = key.op();
  program->key = full;
  program->options_ = options;
  // Parameter and output types, read back from the builder.
  auto signature = pjrt::parse_main_signature(program->mlir);
  if (signature) {
    for (const auto& spec : *signature) program->parameters.push_back({spec.type, spec.dims});
  }
  program->outputs = builder.output_types();
  program->donated = builder.donated();

  std::lock_guard<std::mutex> lock(mutex);
  program->reason_ = key.reason().empty() ? reason_for(key) : key.reason();
  auto [it, inserted] = programs.emplace(full, std::move(program));
  return *it->second;
}

std::shared_ptr<pjrt::Executable> Program::executable() const {
  last_used_.store(++use_clock, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(compile_mutex_);
    if (executable_) return executable_;
  }
  // A compile adds mappings; make room first if the process nears the limit.
  if (mappings_under_pressure()) release_least_recent_programs();
  std::lock_guard<std::mutex> lock(compile_mutex_);
  if (executable_) return executable_;
  executable_ = compile_program(op, identifier(op), mlir, options_);
  note_compile_reason(reason_);
  return executable_;
}

size_t release_least_recent_programs() {
  std::vector<std::shared_ptr<pjrt::Executable>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<std::pair<uint64_t, const Program*>> live;
    for (const auto& [key, program] : programs) {
      // A program compiling or running its lookup now is skipped.
      std::unique_lock<std::mutex> hold(program->compile_mutex_, std::try_to_lock);
      if (hold && program->executable_) live.emplace_back(program->last_used_.load(), program.get());
    }
    std::sort(live.begin(), live.end());
    live.resize(live.size() / 2);
    for (const auto& [stamp, program] : live) {
      std::unique_lock<std::mutex> hold(program->compile_mutex_, std::try_to_lock);
      if (hold && program->executable_) dropped.push_back(std::move(program->executable_));
    }
  }
  std::unordered_set<const pjrt::Executable*> gone;
  for (const auto& e : dropped) gone.insert(e.get());
  runtime().cache().release(gone);
  released += static_cast<int64_t>(dropped.size());
  // Work in flight keeps what it runs alive on the plugin's side; the last
  // reference here goes now.
  return dropped.size();
}

int64_t programs_released() { return released.load(); }
void count_programs_released(int64_t n) { released += n; }
void reset_programs_released() { released = 0; }

void note_compile_reason(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex);
  reasons[reason]++;
}

std::vector<std::pair<std::string, int64_t>> recompile_reasons() {
  std::lock_guard<std::mutex> lock(mutex);
  return {reasons.begin(), reasons.end()};
}

void reset_recompile_reasons() {
  std::lock_guard<std::mutex> lock(mutex);
  reasons.clear();
  hits = 0;
}

int64_t program_hits() { return hits.load(); }

}  // namespace torch_pjrt::backend
