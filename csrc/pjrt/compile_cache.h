// Compiled executables by content: an in-memory map, backed by a folder of
// serialized executables that survives the process. The key is a hash of the
// program text, the plugin's identity and the compile options; a disk entry
// also stores all three in full and is used only when they match, so neither
// a hash collision nor another plugin's entry can return a wrong program.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "pjrt/client.h"
#include "pjrt/compile_options.h"
#include "pjrt/executable.h"
#include "pjrt/hash.h"

namespace torch_pjrt::pjrt {

enum class CacheSource { kCompiled, kMemory, kDisk };
const char* cache_source_name(CacheSource source);

struct CacheStats {
  std::atomic<int64_t> compilations{0};
  std::atomic<int64_t> memory_hits{0};
  std::atomic<int64_t> disk_hits{0};
  // Disk entries found but not used (corrupt, truncated, another plugin's).
  std::atomic<int64_t> disk_rejects{0};
  std::atomic<int64_t> disk_write_failures{0};
  // Time inside the plugin's compiler only (no hashing, disk or lookup).
  std::atomic<int64_t> compile_microseconds{0};
  void reset();
};

class CompileCache {
 public:
  // `disk_dir` empty: memory only. Otherwise the folder is created (mode
  // 0700) if missing; throws Error when it cannot be created or is not a
  // readable, writable folder.
  CompileCache(std::shared_ptr<Client> client, std::string disk_dir);

  struct Lookup {
    std::shared_ptr<Executable> executable;
    CacheSource source;
    Hash128 key;
    double seconds;  // this whole call: lookup, and compiling + writing to disk or loading
  };
  Lookup get_or_compile(std::string_view mlir, const CompileOptions& options = {});

  Hash128 key(std::string_view mlir, const std::string& serialized_options) const;
  // Where the entry for `key` lives on disk; empty without a disk cache.
  std::string entry_path(const Hash128& key) const;
  const std::string& disk_dir() const { return disk_dir_; }
  size_t memory_entries() const;
  // Forgets the in-memory executables (the disk copies stay).
  void clear_memory();
  // Forgets the in-memory entries holding one of `gone` (the disk copies
  // stay); returns how many went.
  size_t release(const std::unordered_set<const Executable*>& gone);

  CacheStats& stats() { return stats_; }

 private:
  std::unique_ptr<Executable> load_from_disk(const Hash128& key, std::string_view mlir,
                                             const std::string& options);
  void store_on_disk(const Hash128& key, std::string_view mlir, const std::string& options,
                     const Executable& executable);

  std::shared_ptr<Client> client_;
  std::string disk_dir_;
  mutable std::mutex mutex_;
  std::unordered_map<Hash128, std::shared_ptr<Executable>, Hash128Hasher> entries_;
  CacheStats stats_;
};

}  // namespace torch_pjrt::pjrt
