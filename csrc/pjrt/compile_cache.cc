#include "pjrt/compile_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pjrt/error.h"
#include "pjrt/warnings.h"

namespace torch_pjrt::pjrt {
namespace {

constexpr char kMagic[] = "TORCH_PJRT_EXECUTABLE\n";
constexpr uint32_t kFormatVersion = 1;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string errno_text() { return std::strerror(errno); }

// mkdir -p where every folder we create is private to the user: compiled
// code is loaded and run, so others must not be able to plant entries.
void make_private_dirs(const std::string& dir) {
  std::string partial;
  std::stringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') partial = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    partial += part;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      throw Error("CompileCache", ErrorCode::kPermissionDenied,
                  "cannot create cache directory '" + partial + "': " + errno_text() +
                      " (set TORCH_PJRT_CACHE_DIR to a writable folder, or to an empty string "
                      "to turn the disk cache off)");
    }
    partial += "/";
  }
}

void check_usable_dir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error("CompileCache", ErrorCode::kFailedPrecondition,
                "cache directory '" + dir + "' is not a directory (set TORCH_PJRT_CACHE_DIR to a "
                "writable folder, or to an empty string to turn the disk cache off)");
  }
  if (access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    throw Error("CompileCache", ErrorCode::kPermissionDenied,
                "cache directory '" + dir + "' is not readable and writable: " + errno_text() +
                    " (set TORCH_PJRT_CACHE_DIR to a writable folder, or to an empty string to "
                    "turn the disk cache off)");
  }
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

void put_blob(std::string& out, std::string_view blob) {
  put_u64(out, blob.size());
  out.append(blob.data(), blob.size());
}

// Reads fields of an entry in order; any read past the end marks it bad.
class EntryReader {
 public:
  explicit EntryReader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  uint64_t u64() {
    if (!need(8)) return 0;
    uint64_t v;
    std::memcpy(&v, data_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  std::string_view blob() {
    uint64_t n = u64();
    if (!need(n)) return {};
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  std::string_view bytes(size_t n) {
    if (!need(n)) return {};
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  size_t position() const { return pos_; }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  bool need(uint64_t n) {
    if (!ok_ || n > data_.size() - pos_) ok_ = false;
    return ok_;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

const char* cache_source_name(CacheSource source) {
  switch (source) {
    case CacheSource::kCompiled: return "compiled";
    case CacheSource::kMemory: return "memory";
    case CacheSource::kDisk: return "disk";
  }
  return "unknown";
}

void CacheStats::reset() {
  compilations = 0;
  memory_hits = 0;
  disk_hits = 0;
  disk_rejects = 0;
  disk_write_failures = 0;
  compile_microseconds = 0;
}

CompileCache::CompileCache(std::shared_ptr<Client> client, std::string disk_dir)
    : client_(std::move(client)), disk_dir_(std::move(disk_dir)) {
  if (disk_dir_.empty()) return;
  while (disk_dir_.size() > 1 && disk_dir_.back() == '/') disk_dir_.pop_back();
  make_private_dirs(disk_dir_);
  check_usable_dir(disk_dir_);
}

Hash128 CompileCache::key(std::string_view mlir, const std::string& serialized_options) const {
  return Hasher()
      .add(client_->plugin().identity())
      .add(uint64_t{0})
      .add(serialized_options)
      .add(uint64_t{0})
      .add(mlir)
      .finish();
}

std::string CompileCache::entry_path(const Hash128& key) const {
  if (disk_dir_.empty()) return {};
  return disk_dir_ + "/" + key.hex() + ".pjrtx";
}

size_t CompileCache::memory_entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void CompileCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

size_t CompileCache::release(const std::unordered_set<const Executable*>& gone) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t released = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (gone.count(it->second.get())) {
      it = entries_.erase(it);
      ++released;
    } else {
      ++it;
    }
  }
  return released;
}

CompileCache::Lookup CompileCache::get_or_compile(std::string_view mlir,
                                                  const CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  std::string serialized_options = options.serialize();
  Hash128 k = key(mlir, serialized_options);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = entries_.find(k); it != entries_.end()) {
      stats_.memory_hits++;
      return {it->second, CacheSource::kMemory, k, seconds_since(start)};
    }
  }

  CacheSource source = CacheSource::kDisk;
  std::unique_ptr<Executable> loaded = load_from_disk(k, mlir, serialized_options);
  if (loaded) {
    stats_.disk_hits++;
  } else {
    // Compiling happens outside the lock: it can take seconds.
    auto compile_start = std::chrono::steady_clock::now();
    loaded = Executable::compile(client_, mlir, options);
    source = CacheSource::kCompiled;
    stats_.compilations++;
    stats_.compile_microseconds += static_cast<int64_t>(seconds_since(compile_start) * 1e6);
    store_on_disk(k, mlir, serialized_options, *loaded);
  }
  std::shared_ptr<Executable> executable(std::move(loaded));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = entries_.emplace(k, executable);
    if (!inserted) executable = it->second;  // another thread finished first
  }
  return {executable, source, k, seconds_since(start)};
}

std::unique_ptr<Executable> CompileCache::load_from_disk(const Hash128& key,
                                                         std::string_view mlir,
                                                         const std::string& options) {
  if (disk_dir_.empty()) return nullptr;
  std::string path = entry_path(key);
  std::ifstream file(path, std::ios::binary);
  if (!file) return nullptr;  // no entry: the common miss
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());

  auto reject = [&](const std::string& why) -> std::unique_ptr<Executable> {
    stats_.disk_rejects++;
    warn("ignoring compile cache entry " + path + ": " + why + "; recompiling");
    return nullptr;
  };

  EntryReader reader(data);
  if (reader.bytes(sizeof(kMagic) - 1) != std::string_view(kMagic, sizeof(kMagic) - 1)) {
    return reject("not a torch-pjrt cache entry");
  }
  uint64_t version = reader.u64();
  if (!reader.ok() || version != kFormatVersion) return reject("unknown entry format");
  std::string_view identity = reader.blob();
  std::string_view stored_options = reader.blob();
  std::string_view program = reader.blob();
  std::string_view payload = reader.blob();
  size_t checked_length = reader.position();
  uint64_t checksum = reader.u64();
  if (!reader.ok() || !reader.at_end()) return reject("truncated or malformed");
  if (checksum != hash128(std::string_view(data).substr(0, checked_length)).low) {
    return reject("checksum mismatch (corrupt)");
  }
  if (identity != client_->plugin().identity()) {
    return reject("written by another plugin (" + std::string(identity) + ")");
  }
  if (stored_options != options || program != mlir) {
    return reject("key collision: the entry holds a different program");
  }
  try {
    return Executable::deserialize(client_, payload, mlir);
  } catch (const Error& e) {
    return reject(std::string("the plugin could not load it: ") + e.what());
  }
}

void CompileCache::store_on_disk(const Hash128& key, std::string_view mlir,
                                 const std::string& options, const Executable& executable) {
  if (disk_dir_.empty()) return;
  std::string payload;
  try {
    payload = executable.serialize();
  } catch (const Error& e) {
    stats_.disk_write_failures++;
    warn(std::string("cannot serialize executable for the disk cache: ") + e.what());
    return;
  }
  std::string entry(kMagic, sizeof(kMagic) - 1);
  put_u64(entry, kFormatVersion);
  put_blob(entry, client_->plugin().identity());
  put_blob(entry, options);
  put_blob(entry, mlir);
  put_blob(entry, payload);
  put_u64(entry, hash128(entry).low);

  // Written under a unique temporary name, then renamed: a reader sees
  // either no entry or a complete one, even with concurrent writers.
  static std::atomic<uint64_t> counter{0};
  std::string final_path = entry_path(key);
  std::string temp_path = disk_dir_ + "/." + key.hex() + ".tmp." + std::to_string(getpid()) +
                          "." + std::to_string(counter++);
  int fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  size_t written = 0;
  while (ok && written < entry.size()) {
    ssize_t n = write(fd, entry.data() + written, entry.size() - written);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) written += static_cast<size_t>(n);
  }
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (ok && rename(temp_path.c_str(), final_path.c_str()) != 0) ok = false;
  if (!ok) {
    std::string why = errno_text();
    unlink(temp_path.c_str());
    stats_.disk_write_failures++;
    warn("cannot write compile cache entry " + final_path + ": " + why);
  }
}

}  // namespace torch_pjrt::pjrt
