// Measures the costs the runtime adds around a PJRT plugin: how long one
// launch of a cached executable takes, how fast host<->device copies are
// next to a plain memcpy, and what the compile cache saves (cold compile vs
// memory hit vs disk hit).
//
//   runtime_bench <plugin.so> <scratch folder>
//
// Prints one JSON object on stdout; the plugin's own logging goes to stderr.
// benchmarks/runtime.py runs it and records the results with machine facts.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/client.h"
#include "pjrt/compile_cache.h"
#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "pjrt/plugin.h"

namespace torch_pjrt::pjrt::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Iteration counts, sized so the whole run stays well under a minute on two
// slow cores while the medians are stable to a few percent.
constexpr int kLaunchWarmup = 500;
constexpr int kLaunchRuns = 3000;
constexpr int kCompileRepeats = 5;
struct TransferSize {
  const char* label;
  size_t bytes;
  int runs;
};
constexpr TransferSize kTransferSizes[] = {
    {"1MiB", size_t{1} << 20, 200},
    {"64MiB", size_t{64} << 20, 25},
};

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Keeps the compiler from dropping a memcpy whose destination is never read.
void clobber(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// ---------------------------------------------------------------------------
// Statistics and JSON output.

// Linear interpolation between the closest ranks of sorted `v`.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return NAN;
  double pos = q * (sorted.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return percentile(v, 0.5);
}

// An ordered JSON object built field by field; values are already JSON text.
class Json {
 public:
  Json& number(const std::string& key, double value) { return raw(key, format(value)); }
  Json& integer(const std::string& key, int64_t value) { return raw(key, std::to_string(value)); }
  Json& boolean(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
  Json& string(const std::string& key, const std::string& value) { return raw(key, quote(value)); }
  Json& object(const std::string& key, const Json& value) { return raw(key, value.text()); }
  Json& numbers(const std::string& key, const std::vector<double>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) list += (i ? ", " : "") + format(values[i]);
    return raw(key, list + "]");
  }

  std::string text(int indent = 0) const {
    std::string pad(indent + 2, ' ');
    std::string out = "{\n";
    for (size_t i = 0; i < fields_.size(); ++i) {
      out += pad + quote(fields_[i].first) + ": " + reindent(fields_[i].second, indent + 2);
      out += i + 1 < fields_.size() ? ",\n" : "\n";
    }
    return out + std::string(indent, ' ') + "}";
  }

 private:
  Json& raw(const std::string& key, std::string value) {
    fields_.emplace_back(key, std::move(value));
    return *this;
  }

  // Six significant digits: more than any timing here can resolve.
  static std::string format(double value) {
    // JSON has no NaN or infinity: a measurement that could not be made is null.
    if (!std::isfinite(value)) return "null";
    char text[32];
    std::snprintf(text, sizeof(text), "%.6g", value);
    return text;
  }

  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
        out += escaped;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }

  // Nested objects are rendered at indent 0; shift their inner lines.
  static std::string reindent(const std::string& value, int indent) {
    std::string out;
    for (char c : value) {
      out += c;
      if (c == '\n') out += std::string(indent, ' ');
    }
    return out;
  }

  std::vector<std::pair<std::string, std::string>> fields_;
};

Json distribution(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Json out;
  out.integer("runs", static_cast<int64_t>(samples.size()))
      .number("median", percentile(samples, 0.5))
      .number("p10", percentile(samples, 0.1))
      .number("p90", percentile(samples, 0.9))
      .number("min", samples.empty() ? NAN : samples.front());
  return out;
}

// ---------------------------------------------------------------------------
// Plugin facts, so results can be compared across plugin releases.

std::string attribute_or_empty(const Plugin& plugin, const std::string& name) {
  std::optional<NamedValue> value = plugin.attribute(name);
  return value ? value->value_string() : std::string();
}

std::string version_string(ApiVersion v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

Json plugin_facts(const Client& client) {
  const Plugin& plugin = client.plugin();
  Json out;
  // The file name only: results are shared, and paths name users and machines.
  out.string("file", fs::path(plugin.path()).filename().string())
      .string("pjrt_api_version", version_string(plugin.plugin_version()))
      .string("header_api_version", version_string(Plugin::header_version()))
      .boolean("plugin_newer_than_header", plugin.version_warning().has_value())
      .string("xla_version", attribute_or_empty(plugin, "xla_version"))
      .string("stablehlo_current_version", attribute_or_empty(plugin, "stablehlo_current_version"))
      .string("platform_name", client.platform_name())
      .string("platform_version", client.platform_version())
      .string("device_kind", client.device(0).kind())
      .integer("devices", static_cast<int64_t>(client.devices().size()));
  return out;
}

// ---------------------------------------------------------------------------
// Launch latency.

const char* const kAddProgram = R"mlir(
module @bench_add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir";

Buffer f32_buffer(const std::shared_ptr<Client>& client, const std::vector<float>& values,
                  const std::vector<int64_t>& dims) {
  Buffer buffer =
      Buffer::from_host(client, client->device(0), values.data(), ElementType::kF32, dims);
  buffer.ready_event().await("host-to-device copy");
  return buffer;
}

Json measure_launch(const std::shared_ptr<Client>& client) {
  CompileCache cache(client, "");
  std::shared_ptr<Executable> add = cache.get_or_compile(kAddProgram).executable;
  const Device& device = client->device(0);
  Buffer a = f32_buffer(client, {1, 2, 3, 4}, {4});
  Buffer b = f32_buffer(client, {10, 20, 30, 40}, {4});
  const std::vector<const Buffer*> inputs = {&a, &b};

  for (int i = 0; i < kLaunchWarmup; ++i) add->execute(inputs, device).done.await();

  // Launch and wait: what a caller that needs the result pays per op. The
  // result is destroyed after the clock stops, as a caller would keep it.
  std::vector<double> with_await;
  with_await.reserve(kLaunchRuns);
  for (int i = 0; i < kLaunchRuns; ++i) {
    auto start = Clock::now();
    ExecuteResult result = add->execute(inputs, device);
    result.done.await();
    with_await.push_back(micros_since(start));
  }

  // Enqueue only: the time until execute() returns, with an idle queue (the
  // wait happens off the clock). A plugin that runs small programs inline on
  // the calling thread has already finished by then; ready_on_return says how
  // often that happened, and so whether the two figures can differ at all.
  std::vector<double> enqueue;
  enqueue.reserve(kLaunchRuns);
  int ready_on_return = 0;
  for (int i = 0; i < kLaunchRuns; ++i) {
    auto start = Clock::now();
    ExecuteResult result = add->execute(inputs, device);
    enqueue.push_back(micros_since(start));
    if (result.done.is_ready()) ++ready_on_return;
    result.done.await();
  }

  Json out;
  out.string("program", "f32[4] + f32[4]")
      .integer("warmup_runs", kLaunchWarmup)
      .object("execute_await_us", distribution(with_await))
      .object("enqueue_only_us", distribution(enqueue))
      .number("ready_on_return_fraction", double(ready_on_return) / kLaunchRuns);
  return out;
}

// ---------------------------------------------------------------------------
// Host <-> device throughput against a host memcpy of the same size.

double gb_per_s(size_t bytes, double micros) { return bytes / (micros * 1e3); }

// Runs `op` once to warm up (page faults, allocator growth), then `runs`
// times, returning the median of the microseconds each call reports. `op`
// times itself so that it can keep set-up and clean-up off the clock.
template <typename Op>
double median_micros(int runs, Op op) {
  op();
  std::vector<double> samples;
  samples.reserve(runs);
  for (int i = 0; i < runs; ++i) samples.push_back(op());
  return median(std::move(samples));
}

Json measure_transfer(const std::shared_ptr<Client>& client, const TransferSize& size) {
  const Device& device = client->device(0);
  const int64_t count = static_cast<int64_t>(size.bytes / sizeof(float));
  // Both host arrays are written once so their pages are mapped before timing.
  std::vector<float> source(count);
  for (int64_t i = 0; i < count; ++i) source[i] = static_cast<float>(i % 1000);
  std::vector<float> destination(count, 0.0f);

  double memcpy_us = median_micros(size.runs, [&] {
    auto start = Clock::now();
    std::memcpy(destination.data(), source.data(), size.bytes);
    clobber(destination.data());
    return micros_since(start);
  });

  // The plugin copies into memory it has just allocated, whose pages the
  // kernel maps (and zeroes) on first touch; memcpy into a new allocation
  // shows how much of the transfer time that alone explains.
  double memcpy_new_us = median_micros(size.runs, [&] {
    auto start = Clock::now();
    std::unique_ptr<char[]> fresh(new char[size.bytes]);
    std::memcpy(fresh.get(), source.data(), size.bytes);
    clobber(fresh.get());
    double elapsed = micros_since(start);
    return elapsed;  // `fresh` is freed off the clock
  });

  // A transfer is done when the device buffer is ready, not when from_host
  // returns. The previous run's buffer is freed off the clock.
  std::optional<Buffer> uploaded;
  double h2d_us = median_micros(size.runs, [&] {
    auto start = Clock::now();
    Buffer buffer = Buffer::from_host(client, device, source.data(), ElementType::kF32, {count});
    buffer.ready_event().await("host-to-device copy");
    double elapsed = micros_since(start);
    uploaded.emplace(std::move(buffer));
    return elapsed;
  });

  double d2h_us = median_micros(size.runs, [&] {
    auto start = Clock::now();
    uploaded->to_host(destination.data(), size.bytes);
    return micros_since(start);
  });
  bool round_trip_ok = std::memcmp(source.data(), destination.data(), size.bytes) == 0;

  Json out;
  out.integer("bytes", static_cast<int64_t>(size.bytes))
      .integer("runs", size.runs)
      .number("memcpy_us", memcpy_us)
      .number("memcpy_new_allocation_us", memcpy_new_us)
      .number("host_to_device_us", h2d_us)
      .number("device_to_host_us", d2h_us)
      .number("memcpy_gb_per_s", gb_per_s(size.bytes, memcpy_us))
      .number("host_to_device_gb_per_s", gb_per_s(size.bytes, h2d_us))
      .number("device_to_host_gb_per_s", gb_per_s(size.bytes, d2h_us))
      .number("host_to_device_over_memcpy", h2d_us / memcpy_us)
      .number("device_to_host_over_memcpy", d2h_us / memcpy_us)
      .number("host_to_device_over_memcpy_new_allocation", h2d_us / memcpy_new_us)
      .boolean("round_trip_ok", round_trip_ok);
  return out;
}

// ---------------------------------------------------------------------------
// Compile cache: cold compile, memory hit, disk hit.

// One MLP layer, tanh(x . w + bias), with `nonce` as the bias so that every
// call yields a program no cache (ours or a plugin's) has seen before.
std::string mlp_program(uint32_t nonce) {
  std::ostringstream out;
  out << R"mlir(
module @bench_mlp {
  func.func public @main(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %bias = stablehlo.constant dense<)mlir"
      << nonce << R"mlir(.0> : tensor<8x16xf32>
    %1 = stablehlo.add %0, %bias : tensor<8x16xf32>
    %2 = stablehlo.tanh %1 : tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}
)mlir";
  return out.str();
}

// Below 2^24, so every nonce is an exact f32 and distinct nonces stay distinct.
uint32_t time_nonce() {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<uint32_t>(ns / 1000) % (1u << 23);
}

double millis(double seconds) { return seconds * 1e3; }

void expect_source(const CompileCache::Lookup& lookup, CacheSource expected) {
  if (lookup.source != expected) {
    throw Error("runtime_bench", ErrorCode::kInternal,
                std::string("expected a ") + cache_source_name(expected) + " lookup, got " +
                    cache_source_name(lookup.source));
  }
}

struct CompileSample {
  double cold_ms;
  double compile_only_ms;  // the cold lookup up to the end of compiling: no disk write
  double memory_hit_ms;
  double disk_hit_ms;
  double entry_bytes;
};

// One program through the three paths. `dir` must not exist yet, so the first
// lookup cannot find anything on disk.
CompileSample compile_once(const std::shared_ptr<Client>& client, const std::string& program,
                           const std::string& dir) {
  CompileSample sample{};
  {
    CompileCache cache(client, dir);
    auto start = Clock::now();
    CompileCache::Lookup cold = cache.get_or_compile(program);
    sample.cold_ms = micros_since(start) / 1e3;
    expect_source(cold, CacheSource::kCompiled);
    sample.compile_only_ms = cache.stats().compile_microseconds.load() / 1e3;
    sample.entry_bytes = static_cast<double>(fs::file_size(cache.entry_path(cold.key)));

    start = Clock::now();
    CompileCache::Lookup warm = cache.get_or_compile(program);
    sample.memory_hit_ms = micros_since(start) / 1e3;
    expect_source(warm, CacheSource::kMemory);
  }  // The cache and both lookups' executables are gone here.

  CompileCache reopened(client, dir);
  auto start = Clock::now();
  CompileCache::Lookup loaded = reopened.get_or_compile(program);
  sample.disk_hit_ms = micros_since(start) / 1e3;
  expect_source(loaded, CacheSource::kDisk);
  return sample;
}

Json measure_compile(const std::shared_ptr<Client>& client, const std::string& scratch) {
  uint32_t nonce = time_nonce();
  // The first compile of a process also initialises the compiler itself; it
  // is reported apart so that "cold" means a new program, not a new process.
  CompileCache first(client, "");
  double first_ms = millis(first.get_or_compile(mlp_program(nonce++)).seconds);

  std::vector<double> cold, compile_only, memory_hit, disk_hit, entry_bytes;
  for (int i = 0; i < kCompileRepeats; ++i) {
    std::string dir = scratch + "/compile-" + std::to_string(nonce) + "-" + std::to_string(i);
    CompileSample s = compile_once(client, mlp_program(nonce++), dir);
    fs::remove_all(dir);
    cold.push_back(s.cold_ms);
    compile_only.push_back(s.compile_only_ms);
    memory_hit.push_back(s.memory_hit_ms);
    disk_hit.push_back(s.disk_hit_ms);
    entry_bytes.push_back(s.entry_bytes);
  }

  double cold_ms = median(cold);
  Json out;
  out.string("program", "tanh(f32[8,16] . f32[16,16] + const)")
      .integer("repeats", kCompileRepeats)
      .number("first_in_process_ms", first_ms)
      .number("cold_ms", cold_ms)
      .number("compile_only_ms", median(compile_only))
      .number("memory_hit_ms", median(memory_hit))
      .number("disk_hit_ms", median(disk_hit))
      .number("cold_over_memory_hit", cold_ms / median(memory_hit))
      .number("cold_over_disk_hit", cold_ms / median(disk_hit))
      .number("entry_bytes", median(entry_bytes))
      .object("samples_ms", Json()
                                .numbers("cold", cold)
                                .numbers("memory_hit", memory_hit)
                                .numbers("disk_hit", disk_hit));
  return out;
}

int run(const std::string& plugin_path, const std::string& scratch) {
  auto start = Clock::now();
  std::shared_ptr<Client> client = Client::create(Plugin::load(plugin_path));
  fs::create_directories(scratch);

  Json transfer;
  for (const TransferSize& size : kTransferSizes) {
    transfer.object(size.label, measure_transfer(client, size));
  }
  Json result;
  result.string("schema", "torch-pjrt/runtime-bench/1")
      .object("plugin", plugin_facts(*client))
      .object("launch", measure_launch(client))
      .object("transfer", transfer)
      .object("compile", measure_compile(client, scratch))
      .number("elapsed_s", micros_since(start) / 1e6);
  std::cout << result.text() << std::endl;
  return 0;
}

}  // namespace
}  // namespace torch_pjrt::pjrt::bench

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " <pjrt plugin .so> <scratch folder>\n";
    return 2;
  }
  try {
    return torch_pjrt::pjrt::bench::run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "runtime_bench: " << e.what() << "\n";
    return 1;
  }
}
