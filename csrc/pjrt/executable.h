// A compiled program loaded on a client, with one owner. Compiled from
// StableHLO MLIR text or loaded from its serialized form (the disk cache).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/client.h"
#include "pjrt/compile_options.h"
#include "pjrt/device.h"
#include "pjrt/event.h"
#include "pjrt/program_signature.h"

namespace torch_pjrt::pjrt {

struct ExecuteOptions {
  // Inputs the program marks as donatable (jax.buffer_donor or
  // tf.aliasing_output) that must be kept alive anyway for this call.
  std::vector<int64_t> non_donatable_inputs;
  // Non-zero ties together the launches of one multi-device program: every
  // device's launch of one collective must carry the same id.
  int launch_id = 0;
};

struct ExecuteResult {
  std::vector<Buffer> outputs;
  // Completes when the execution has finished; an execution error also
  // reaches every output buffer.
  Event done;
};

class Executable {
 public:
  // Compiles StableHLO (MLIR text or bytecode). Throws Error with the
  // plugin's diagnostic when the program is malformed.
  static std::unique_ptr<Executable> compile(const std::shared_ptr<Client>& client,
                                             std::string_view mlir,
                                             const CompileOptions& options = {});
  // Loads bytes produced by serialize() with a plugin of the same identity.
  // `mlir`, the program's source when known, lets execute() check arguments.
  static std::unique_ptr<Executable> deserialize(const std::shared_ptr<Client>& client,
                                                 std::string_view bytes,
                                                 std::string_view mlir = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  std::string serialize() const;
  const std::string& name() const { return name_; }
  size_t num_outputs() const { return num_outputs_; }
  // Parameter types read from the program text; empty when unknown.
  const std::optional<std::vector<TensorSpec>>& inputs() const { return inputs_; }

  // Runs on `device` with `inputs` (borrowed; a donated input is consumed
  // and reports is_deleted() afterwards). Returns as soon as the work is
  // enqueued. Throws Error (kInvalidArgument) when the inputs' count, types
  // or shapes differ from the program's parameters.
  ExecuteResult execute(const std::vector<const Buffer*>& inputs, const Device& device,
                        const ExecuteOptions& options = {}) const;

  // The devices a program compiled with a device assignment runs on, in the
  // order execute_all() takes their inputs and returns their results.
  std::vector<Device> addressable_devices() const;
  // Runs a multi-device program on every addressable device in one launch:
  // `inputs[d]` are the arguments of addressable_devices()[d]. Checks every
  // device's arguments before anything is launched.
  std::vector<ExecuteResult> execute_all(const std::vector<std::vector<const Buffer*>>& inputs,
                                         const ExecuteOptions& options = {}) const;

 private:
  Executable(std::shared_ptr<Client> client, PJRT_LoadedExecutable* loaded);
  void release() noexcept;
  void check_inputs(const std::vector<const Buffer*>& inputs) const;
  std::shared_ptr<Client> client_;
  PJRT_LoadedExecutable* loaded_;
  PJRT_Executable* executable_ = nullptr;
  std::string name_;
  size_t num_outputs_ = 0;
  std::optional<std::vector<TensorSpec>> inputs_;
};

}  // namespace torch_pjrt::pjrt
