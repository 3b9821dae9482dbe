#include "pjrt/executable.h"

#include "pjrt/error.h"

namespace torch_pjrt::pjrt {

namespace {
// Records an execution in the timeline when it completes. The callback
// holds the timeline, never the client.
void track(const Event& done, const std::shared_ptr<Timeline>& timeline, int device,
           int64_t launched) {
  done.on_ready([timeline, device, launched](std::optional<Error>) {
    timeline->record(device, launched, Timeline::now_ns());
  });
}
}  // namespace

std::unique_ptr<Executable> Executable::compile(const std::shared_ptr<Client>& client,
                                                std::string_view mlir,
                                                const CompileOptions& options) {
  std::string serialized_options = options.serialize();
  auto program = TORCH_PJRT_ARGS(PJRT_Program);
  program.code = const_cast<char*>(mlir.data());  // read-only for compilation
  program.code_size = mlir.size();
  static constexpr char kFormat[] = "mlir";
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;

  auto args = TORCH_PJRT_ARGS(PJRT_Client_Compile_Args);
  args.client = client->raw();
  args.program = &program;
  args.compile_options = serialized_options.data();
  args.compile_options_size = serialized_options.size();
  check(client->api(), client->api()->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  std::unique_ptr<Executable> executable(new Executable(client, args.executable));
  executable->inputs_ = parse_main_signature(mlir);
  return executable;
}

std::unique_ptr<Executable> Executable::deserialize(const std::shared_ptr<Client>& client,
                                                    std::string_view bytes,
                                                    std::string_view mlir) {
  auto args = TORCH_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args);
  args.client = client->raw();
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  check(client->api(), client->api()->PJRT_Executable_DeserializeAndLoad(&args),
        "PJRT_Executable_DeserializeAndLoad");
  std::unique_ptr<Executable> executable(new Executable(client, args.loaded_executable));
  if (!mlir.empty()) executable->inputs_ = parse_main_signature(mlir);
  return executable;
}

Executable::Executable(std::shared_ptr<Client> client, PJRT_LoadedExecutable* loaded)
    : client_(std::move(client)), loaded_(loaded) {
  const PJRT_Api* api = client_->api();
  try {
    auto get = TORCH_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args);
    get.loaded_executable = loaded_;
    check(api, api->PJRT_LoadedExecutable_GetExecutable(&get),
          "PJRT_LoadedExecutable_GetExecutable");
    executable_ = get.executable;

    auto name = TORCH_PJRT_ARGS(PJRT_Executable_Name_Args);
    name.executable = executable_;
    check(api, api->PJRT_Executable_Name(&name), "PJRT_Executable_Name");
    name_.assign(name.executable_name, name.executable_name_size);

    auto outputs = TORCH_PJRT_ARGS(PJRT_Executable_NumOutputs_Args);
    outputs.executable = executable_;
    check(api, api->PJRT_Executable_NumOutputs(&outputs), "PJRT_Executable_NumOutputs");
    num_outputs_ = outputs.num_outputs;
  } catch (...) {
    release();
    throw;
  }
}

Executable::~Executable() { release(); }

void Executable::release() noexcept {
  const PJRT_Api* api = client_->api();
  if (executable_ != nullptr) {
    auto args = TORCH_PJRT_ARGS(PJRT_Executable_Destroy_Args);
    args.executable = executable_;
    if (PJRT_Error* error = api->PJRT_Executable_Destroy(&args)) take_error(api, error, "");
    executable_ = nullptr;
  }
  if (loaded_ != nullptr) {
    auto args = TORCH_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args);
    args.executable = loaded_;
    if (PJRT_Error* error = api->PJRT_LoadedExecutable_Destroy(&args)) take_error(api, error, "");
    loaded_ = nullptr;
  }
}

std::string Executable::serialize() const {
  auto args = TORCH_PJRT_ARGS(PJRT_Executable_Serialize_Args);
  args.executable = executable_;
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_Executable_Serialize(&args), "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  if (args.serialized_executable_deleter != nullptr) {
    args.serialized_executable_deleter(args.serialized_executable);
  }
  return bytes;
}

void Executable::check_inputs(const std::vector<const Buffer*>& inputs) const {
  if (!inputs_) return;
  if (inputs.size() != inputs_->size()) {
    throw Error("Executable::execute", ErrorCode::kInvalidArgument,
                "program '" + name_ + "' takes " + std::to_string(inputs_->size()) +
                    " argument(s), got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ElementType type = inputs[i]->element_type();
    std::vector<int64_t> dims = inputs[i]->dims();
    if (!(*inputs_)[i].matches(type, dims)) {
      throw Error("Executable::execute", ErrorCode::kInvalidArgument,
                  "argument " + std::to_string(i) + " of program '" + name_ + "' must be " +
                      (*inputs_)[i].to_string() + ", got " + TensorSpec::to_string(type, dims));
    }
  }
}

ExecuteResult Executable::execute(const std::vector<const Buffer*>& inputs, const Device& device,
                                  const ExecuteOptions& options) const {
  check_inputs(inputs);
  std::vector<PJRT_Buffer*> arguments;
  arguments.reserve(inputs.size());
  for (const Buffer* input : inputs) arguments.push_back(input->raw());
  PJRT_Buffer* const* argument_list = arguments.data();

  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* done = nullptr;

  auto execute_options = TORCH_PJRT_ARGS(PJRT_ExecuteOptions);
  execute_options.non_donatable_input_indices = options.non_donatable_inputs.data();
  execute_options.num_non_donatable_input_indices = options.non_donatable_inputs.size();
  execute_options.launch_id = options.launch_id;

  auto args = TORCH_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args);
  args.executable = loaded_;
  args.options = &execute_options;
  args.argument_lists = &argument_list;
  args.num_devices = 1;
  args.num_args = arguments.size();
  args.output_lists = &output_list;
  args.device_complete_events = &done;
  args.execute_device = device.raw();
  const PJRT_Api* api = client_->api();
  const std::shared_ptr<Timeline>& timeline = client_->timeline();
  const int64_t launched = timeline->enabled() ? Timeline::now_ns() : 0;
  check(api, api->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute");
  client_->counters().executions++;

  ExecuteResult result;
  result.done = Event(api, done);
  if (launched != 0) track(result.done, timeline, device.id(), launched);
  result.outputs.reserve(outputs.size());
  for (PJRT_Buffer* out : outputs) result.outputs.emplace_back(client_, out);
  return result;
}

std::vector<Device> Executable::addressable_devices() const {
  auto args = TORCH_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args);
  args.executable = loaded_;
  const PJRT_Api* api = client_->api();
  check(api, api->PJRT_LoadedExecutable_AddressableDevices(&args),
        "PJRT_LoadedExecutable_AddressableDevices");
  std::vector<Device> devices;
  for (size_t i = 0; i < args.num_addressable_devices; ++i) {
    devices.emplace_back(api, args.addressable_devices[i]);
  }
  return devices;
}

std::vector<ExecuteResult> Executable::execute_all(
    const std::vector<std::vector<const Buffer*>>& inputs, const ExecuteOptions& options) const {
  size_t devices = inputs.size();
  if (devices != addressable_devices().size()) {
    throw Error("Executable::execute_all", ErrorCode::kInvalidArgument,
                "program '" + name_ + "' runs on " + std::to_string(addressable_devices().size()) +
                    " device(s), got arguments for " + std::to_string(devices));
  }
  std::vector<std::vector<PJRT_Buffer*>> arguments(devices);
  std::vector<PJRT_Buffer* const*> argument_lists;
  for (size_t d = 0; d < devices; ++d) {
    check_inputs(inputs[d]);
    if (d > 0 && inputs[d].size() != inputs[0].size()) {
      throw Error("Executable::execute_all", ErrorCode::kInvalidArgument,
                  "every device needs the same number of arguments");
    }
    for (const Buffer* input : inputs[d]) arguments[d].push_back(input->raw());
    argument_lists.push_back(arguments[d].data());
  }
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices,
                                                 std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists;
  for (auto& list : outputs) output_lists.push_back(list.data());
  std::vector<PJRT_Event*> done(devices, nullptr);

  auto execute_options = TORCH_PJRT_ARGS(PJRT_ExecuteOptions);
  execute_options.non_donatable_input_indices = options.non_donatable_inputs.data();
  execute_options.num_non_donatable_input_indices = options.non_donatable_inputs.size();
  execute_options.launch_id = options.launch_id;

  auto args = TORCH_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args);
  args.executable = loaded_;
  args.options = &execute_options;
  args.argument_lists = argument_lists.data();
  args.num_devices = devices;
  args.num_args = devices ? inputs[0].size() : 0;
  args.output_lists = output_lists.data();
  args.device_complete_events = done.data();
  args.execute_device = nullptr;
  const PJRT_Api* api = client_->api();
  const std::shared_ptr<Timeline>& timeline = client_->timeline();
  const int64_t launched = timeline->enabled() ? Timeline::now_ns() : 0;
  check(api, api->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute");
  client_->counters().executions += static_cast<int64_t>(devices);

  std::vector<ExecuteResult> results(devices);
  std::vector<Device> targets = launched != 0 ? addressable_devices() : std::vector<Device>{};
  for (size_t d = 0; d < devices; ++d) {
    results[d].done = Event(api, done[d]);
    if (launched != 0) track(results[d].done, timeline, targets[d].id(), launched);
    for (PJRT_Buffer* out : outputs[d]) results[d].outputs.emplace_back(client_, out);
  }
  return results;
}

}  // namespace torch_pjrt::pjrt
