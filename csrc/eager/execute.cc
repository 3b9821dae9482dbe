#include "eager/execute.h"

#include <c10/util/Exception.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "eager/device_events.h"
#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "eager/pending_graph.h"

namespace torch_pjrt::backend {
namespace {

std::mutex scalar_mutex;
std::map<std::tuple<int, int, uint64_t>, BufferPtr> scalars;

BufferPtr upload_scalar(int device, pjrt::ElementType type, const void* bytes, uint64_t bits) {
  auto key = std::make_tuple(device, static_cast<int>(type), bits);
  std::lock_guard<std::mutex> lock(scalar_mutex);
  if (auto it = scalars.find(key); it != scalars.end()) return it->second;
  if (scalars.size() > 4096) scalars.clear();
  auto& client = runtime().client();
  auto buffer = std::make_shared<pjrt::Buffer>(
      pjrt::Buffer::from_host(client, client->device(device), bytes, type, {}));
  scalars.emplace(key, buffer);
  return buffer;
}

}  // namespace

std::vector<BufferPtr> run_program(const Program& program, const std::vector<BufferPtr>& inputs,
                                   int device, const std::vector<bool>& may_donate, bool fusable) {
  // Fused eager: the launch joins the device's pending graph; its results
  // are deferred buffers that the graph fills when something needs them.
  if (fusable && settings().eager == EagerMode::kFused) return eager::record(program, inputs, device);
  std::vector<const pjrt::Buffer*> raw;
  raw.reserve(inputs.size());
  pjrt::ExecuteOptions options;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_INTERNAL_ASSERT(inputs[i] != nullptr, "torch_pjrt: missing program input ", i);
    raw.push_back(inputs[i].get());
    bool donated = i < program.donated.size() && program.donated[i];
    bool allowed = i < may_donate.size() && may_donate[i];
    if (donated && !allowed) options.non_donatable_inputs.push_back(static_cast<int64_t>(i));
  }
  auto& client = runtime().client();
  pjrt::ExecuteResult result = program.executable()->execute(raw, client->device(device), options);
  if (settings().eager == EagerMode::kDebug) {
    result.done.await("program execution");
  } else {
    track(device, std::move(result.done));
  }
  std::vector<BufferPtr> outputs;
  outputs.reserve(result.outputs.size());
  for (auto& out : result.outputs) outputs.push_back(std::make_shared<pjrt::Buffer>(std::move(out)));
  return outputs;
}

BufferPtr scalar_buffer(int device, pjrt::ElementType type, double value) {
  using pjrt::ElementType;
  switch (type) {
    case ElementType::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &value, 8);
      return upload_scalar(device, type, &value, bits);
    }
    case ElementType::kF32: {
      float v = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      return upload_scalar(device, type, &v, bits);
    }
    case ElementType::kBF16: {
      c10::BFloat16 v(static_cast<float>(value));
      return upload_scalar(device, type, &v, v.x);
    }
    case ElementType::kF16: {
      c10::Half v(static_cast<float>(value));
      return upload_scalar(device, type, &v, v.x);
    }
    default:
      return scalar_buffer_int(device, type, static_cast<int64_t>(value));
  }
}

BufferPtr scalar_buffer_int(int device, pjrt::ElementType type, int64_t value) {
  using pjrt::ElementType;
  if (type == ElementType::kF64 || type == ElementType::kF32 || type == ElementType::kBF16 ||
      type == ElementType::kF16) {
    return scalar_buffer(device, type, static_cast<double>(value));
  }
  // Little-endian: the low bytes of the int64 are the value at any width.
  uint64_t bits = static_cast<uint64_t>(value);
  if (type == ElementType::kPred) bits = value != 0;
  return upload_scalar(device, type, &bits, bits);
}

BufferPtr scalar_buffer_complex(int device, pjrt::ElementType type, double re, double im) {
  if (type == pjrt::ElementType::kC64) {
    float parts[2] = {static_cast<float>(re), static_cast<float>(im)};
    uint64_t bits;
    std::memcpy(&bits, parts, 8);
    return upload_scalar(device, type, parts, bits);
  }
  TORCH_INTERNAL_ASSERT(type == pjrt::ElementType::kC128, "torch_pjrt: not a complex type");
  // 16 bytes do not fit the cache key: uploaded each time.
  double parts[2] = {re, im};
  auto& client = runtime().client();
  return std::make_shared<pjrt::Buffer>(pjrt::Buffer::from_host(client, client->device(device), parts, type, {}));
}

namespace {
std::atomic<int64_t> syncs{0};
}  // namespace

void note_host_sync() { syncs++; }
int64_t host_syncs() { return syncs.load(); }
void reset_host_syncs() { syncs = 0; }

namespace {
std::mutex checks_mutex;
// One buffer of conditions: a scalar (an op's check) or pred[N] (a compiled
// graph's checks), with a message and an error type per element.
struct PendingCheck {
  BufferPtr ok;
  std::shared_ptr<const CheckMessages> meaning;
};
std::vector<PendingCheck> pending_checks;

// Raises for the first element of `values` that is false.
void raise_first_failure(const PendingCheck& check, const bool* values, const char* when) {
  const CheckMessages& m = *check.meaning;
  for (size_t i = 0; i < m.messages.size(); ++i) {
    if (values[i]) continue;
    if (m.index_errors[i]) {
      TORCH_CHECK_INDEX(false, m.messages[i], when);
    } else {
      TORCH_CHECK(false, m.messages[i], when);
    }
  }
}

bool all_true(const bool* values, size_t n) {
  return std::all_of(values, values + n, [](bool v) { return v; });
}

void add_check(PendingCheck check) {
  if (settings().eager == EagerMode::kDebug) {
    size_t n = check.meaning->messages.size();
    std::unique_ptr<bool[]> values(new bool[n]());
    check.ok->to_host(values.get(), n);
    raise_first_failure(check, values.get(), "");
    return;
  }
  std::lock_guard<std::mutex> lock(checks_mutex);
  pending_checks.push_back(std::move(check));
  // A loop that never waits for the device (a decode loop over a compiled
  // step) would hold every check it made. Past a bound, the conditions the
  // device has already computed are read without waiting; those that hold
  // are dropped, a failed one stays to be raised at the next host wait.
  constexpr size_t kSweepAt = 4096;
  if (pending_checks.size() % kSweepAt != 0) return;
  std::vector<PendingCheck> kept;
  for (PendingCheck& c : pending_checks) {
    size_t n = c.meaning->messages.size();
    std::unique_ptr<bool[]> values(new bool[n]());
    if (!c.ok->is_deferred() && c.ok->ready_event().is_ready()) c.ok->to_host(values.get(), n);
    if (!all_true(values.get(), n)) kept.push_back(std::move(c));
  }
  pending_checks.swap(kept);
}
}  // namespace

void defer_check(BufferPtr ok, std::string message, bool index_error) {
  add_check(PendingCheck{std::move(ok), std::make_shared<const CheckMessages>(CheckMessages{
                                            {std::move(message)}, {index_error}})});
}

void defer_checks(BufferPtr ok, std::shared_ptr<const CheckMessages> meaning) {
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(meaning->messages.size()) == ok->element_count() &&
                        meaning->messages.size() == meaning->index_errors.size(),
                        "torch_pjrt: a check buffer of ", ok->element_count(),
                        " conditions with ", meaning->messages.size(), " messages");
  add_check(PendingCheck{std::move(ok), std::move(meaning)});
}

void raise_failed_checks() {
  std::vector<PendingCheck> checks;
  {
    std::lock_guard<std::mutex> lock(checks_mutex);
    if (pending_checks.empty()) return;
    checks.swap(pending_checks);
  }
  // All copies are started before any is waited for: one round trip for
  // every check, not one each (a compiled decode step makes one per call).
  std::vector<std::unique_ptr<bool[]>> values;
  std::vector<pjrt::Event> copies;
  values.reserve(checks.size());
  copies.reserve(checks.size());
  for (const PendingCheck& check : checks) {
    size_t n = check.meaning->messages.size();
    values.emplace_back(new bool[n]());
    copies.push_back(check.ok->to_host_async(values.back().get(), n));
  }
  for (pjrt::Event& e : copies) e.await_polling("reading a deferred check", pjrt::kHostSyncPoll);
  for (size_t i = 0; i < checks.size(); ++i) {
    raise_first_failure(checks[i], values[i].get(),
                        " (reported when the host next waited for the device)");
  }
}

void synchronize(int device) {
  eager::flush(device, "synchronize");
  raise_failed_checks();
  wait_for_events(device, "torch.tpu.synchronize");
}

}  // namespace torch_pjrt::backend
