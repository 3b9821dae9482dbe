// torch_pjrt._C: the Python face of the runtime. The one file that includes
// <torch/extension.h> (for pybind11 and tensor conversion).
#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/dtypes.h"
#include "backend/device_storage.h"
#include "eager/execute.h"
#include "backend/fallback.h"
#include "backend/generator.h"
#include "backend/graph.h"
#include "eager/program_cache.h"
#include "eager/mapping_budget.h"
#include "backend/runtime_state.h"
#include "backend/settings.h"
#include "eager/op_kernel.h"
#include "kernels/kernel_ops.h"
#include "ops/lowering.h"
#include "pjrt/error.h"
#include "eager/mode.h"
#include "eager/pending_graph.h"
#include "pjrt/executable.h"
#include "pjrt/runtime.h"
#include "pjrt/warnings.h"

namespace py = pybind11;

namespace torch_pjrt::distributed {
void init_bindings(py::module& m);  // csrc/distributed/bindings.cc
}

namespace torch_pjrt::backend {

void register_hooks();  // hooks.cc

using ops::to_element_type;
using ops::to_scalar_type;
namespace {

using pjrt::Buffer;
using pjrt::Executable;

int device_index(const pjrt::Device& device) {
  const auto& devices = runtime().client()->devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == device) return static_cast<int>(i);
  }
  return -1;
}

std::shared_ptr<Buffer> buffer_from_tensor(const at::Tensor& tensor, int device) {
  TORCH_CHECK(tensor.device().is_cpu(), "DeviceArray.from_tensor: expected a CPU tensor, got one on ",
              tensor.device());
  pjrt::ElementType type = to_element_type(tensor.scalar_type());
  at::Tensor dense = tensor.contiguous();
  std::vector<int64_t> dims(dense.sizes().begin(), dense.sizes().end());
  auto& client = runtime().client();
  // The tensor is kept alive until the plugin has read it; the copy is async.
  auto owner = std::make_shared<at::Tensor>(dense);
  py::gil_scoped_release no_gil;
  return std::make_shared<Buffer>(Buffer::from_host_async(client, client->device(device),
                                                          dense.data_ptr(), type, dims, owner));
}

at::Tensor buffer_to_tensor(const Buffer& buffer) {
  std::vector<int64_t> dims = buffer.dims();
  at::Tensor out = at::empty(dims, at::TensorOptions().dtype(to_scalar_type(buffer.element_type())));
  py::gil_scoped_release no_gil;
  buffer.to_host(out.data_ptr(), out.nbytes());
  return out;
}

py::dict named_values(const std::vector<pjrt::NamedValue>& values) {
  py::dict out;
  for (const auto& v : values) {
    std::visit([&](const auto& x) { out[py::str(v.name)] = py::cast(x); }, v.value);
  }
  return out;
}

py::dict runtime_info() {
  pjrt::Runtime& rt = runtime();
  py::dict info;
  info["plugin_path"] = rt.plugin().path();
  info["plugin_identity"] = rt.plugin().identity();
  auto version = rt.plugin().plugin_version();
  auto header = pjrt::Plugin::header_version();
  info["pjrt_api_version"] = py::make_tuple(version.major, version.minor);
  info["pjrt_header_version"] = py::make_tuple(header.major, header.minor);
  info["version_warning"] = rt.plugin().version_warning() ? py::cast(*rt.plugin().version_warning())
                                                          : py::none();
  info["attributes"] = named_values(rt.plugin().attributes());
  info["platform_name"] = rt.client()->platform_name();
  info["platform_version"] = rt.client()->platform_version();
  info["cache_dir"] = rt.cache().disk_dir();
  py::list devices;
  for (const auto& device : rt.client()->devices()) {
    py::dict d;
    d["id"] = device.id();
    d["kind"] = device.kind();
    d["debug_string"] = device.debug_string();
    d["attributes"] = named_values(device.attributes());
    if (auto stats = device.memory_stats()) {
      d["bytes_in_use"] = stats->bytes_in_use;
      d["peak_bytes_in_use"] = stats->peak_bytes_in_use ? py::cast(*stats->peak_bytes_in_use)
                                                        : py::none();
      d["bytes_limit"] = stats->bytes_limit ? py::cast(*stats->bytes_limit) : py::none();
    }
    devices.append(d);
  }
  info["devices"] = devices;
  return info;
}

EagerMode eager_mode_named(const std::string& name) {
  if (name == "strict") return EagerMode::kStrict;
  if (name == "debug") return EagerMode::kDebug;
  if (name == "fused") return EagerMode::kFused;
  throw py::value_error("eager mode " + name + " is not one of strict, debug, fused");
}

py::dict counters() {
  py::dict out;
  if (!runtime_initialized()) {
    out["fallback_ops"] = py::dict();
    out["recompile_reasons"] = py::dict();
    return out;
  }
  auto& stats = runtime().cache().stats();
  auto& c = runtime().client()->counters();
  out["compilations"] = stats.compilations.load();
  // Eager hits are answered by the program cache before the compile cache.
  out["cache_hits_memory"] = stats.memory_hits.load() + program_hits();
  out["cache_hits_disk"] = stats.disk_hits.load();
  out["cache_disk_rejects"] = stats.disk_rejects.load();
  out["compile_seconds"] = stats.compile_microseconds.load() / 1e6;
  out["programs_released"] = programs_released();
  out["executions"] = c.executions.load();
  out["host_to_device_bytes"] = c.host_to_device_bytes.load();
  out["device_to_host_bytes"] = c.device_to_host_bytes.load();
  out["device_to_device_bytes"] = c.device_to_device_bytes.load();
  pjrt::Timeline::Totals timeline = runtime().client()->timeline()->totals();
  out["device_busy_seconds"] = timeline.busy_ns / 1e9;
  out["device_idle_seconds"] = timeline.idle_ns / 1e9;
  out["timeline_programs"] = timeline.programs;
  py::dict fallbacks, reasons;
  for (const auto& [name, count] : fallback_counts()) fallbacks[py::str(name)] = count;
  for (const auto& [why, count] : recompile_reasons()) reasons[py::str(why)] = count;
  out["fallback_ops"] = fallbacks;
  out["host_syncs"] = host_syncs();
  out["recompile_reasons"] = reasons;
  eager::FusedCounters fused = eager::fused_counters();
  out["fused_ops_recorded"] = fused.ops_recorded;
  out["fused_graphs_run"] = fused.graphs_run;
  out["fused_graphs_compiled"] = fused.graphs_compiled;
  out["fused_values_materialized"] = fused.values_materialized;
  py::dict flushes;
  for (const auto& [why, count] : fused.flushes) flushes[py::str(why)] = count;
  out["fused_flushes"] = flushes;
  return out;
}

void reset_counters() {
  eager::reset_fused_counters();
  reset_fallback_counts();
  reset_recompile_reasons();
  reset_host_syncs();
  reset_programs_released();
  if (!runtime_initialized()) return;
  runtime().cache().stats().reset();
  runtime().client()->counters().reset();
  runtime().client()->timeline()->reset();
}

void set_timeline(bool on) { runtime().client()->timeline()->set_enabled(on); }



// Runtime warnings become Python RuntimeWarnings; they may come from any
// thread, so the GIL is taken first.
void route_warnings_to_python() {
  pjrt::set_warning_handler([](const std::string& message) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, ("torch_pjrt: " + message).c_str(), 1) != 0) {
      PyErr_Clear();  // a warnings filter turned it into an error we cannot raise here
    }
  });
}

void bind_graphs(py::module& m) {
  py::class_<GraphRef>(m, "_GraphRef")
      .def(py::init([](int node, int output) { return GraphRef{node, output}; }))
      .def_readonly("node", &GraphRef::node)
      .def_readonly("output", &GraphRef::output)
      .def("__repr__", [](const GraphRef& r) {
        return "_GraphRef(" + std::to_string(r.node) + ", " + std::to_string(r.output) + ")";
      });
  py::class_<GraphProgram, std::shared_ptr<GraphProgram>>(m, "_GraphProgram")
      .def_property_readonly("num_results", [](const GraphProgram& g) { return g.num_results; })
      .def_property_readonly("num_checks", [](const GraphProgram& g) {
        return g.checks ? g.checks->messages.size() : size_t{0};
      })
      .def("run", [](const GraphProgram& g, const std::vector<at::Tensor>& args, int device,
                     const std::vector<std::pair<int, int>>& mutations) {
        return run_graph(g, args, device, mutations);
      });
  // nodes: [(op, args tuple, kwargs dict, [(dtype | None, shape)])]
  m.def("_compile_graph", [](const std::string& name, const std::string& key,
                             const std::string& reason, const py::list& inputs,
                             const py::list& nodes, const std::vector<GraphRef>& outputs) {
    std::vector<GraphInput> ins;
    for (py::handle h : inputs) {
      auto t = h.cast<py::tuple>();
      ins.push_back(GraphInput{t[0].cast<at::ScalarType>(),
                               t[1].cast<std::vector<int64_t>>(), t[2].cast<bool>()});
    }
    std::vector<GraphNode> ns;
    for (py::handle h : nodes) {
      auto t = h.cast<py::tuple>();
      GraphNode node{t[0].cast<std::string>(), t[1].cast<py::tuple>(), t[2].cast<py::dict>(), {}};
      for (py::handle e : t[3]) {
        auto et = e.cast<py::tuple>();
        ExpectedOutput out;
        if (!et[0].is_none()) out.dtype = et[0].cast<at::ScalarType>();
        out.shape = et[1].cast<std::vector<int64_t>>();
        node.expected.push_back(std::move(out));
      }
      ns.push_back(std::move(node));
    }
    return compile_graph(name, key, reason, ins, ns, outputs);
  });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-pjrt native extension";

  // PjrtError(RuntimeError) carries the failing call, the PJRT code name and
  // the plugin's own message as attributes.
  static PyObject* pjrt_error =
      PyErr_NewException("torch_pjrt._C.PjrtError", PyExc_RuntimeError, nullptr);
  m.attr("PjrtError") = py::handle(pjrt_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const pjrt::Error& e) {
      py::object instance = py::handle(pjrt_error)(e.what());
      instance.attr("call") = e.call();
      instance.attr("code") = pjrt::error_code_name(e.code());
      instance.attr("pjrt_message") = e.message();
      PyErr_SetObject(pjrt_error, instance.ptr());
    }
  });
  route_warnings_to_python();
  torch_pjrt::backend::register_hooks();
  register_lowered_ops();
  torch_pjrt::distributed::init_bindings(m);

  m.def(
      "_init_runtime",
      [](const std::string& plugin_path, int cpu_devices, const std::string& cache_dir,
         const std::string& eager, const std::string& fallback, const std::string& dump_dir,
         int fused_max_ops) {
        BackendSettings s;
        s.eager = eager_mode_named(eager);
        s.fused_max_ops = fused_max_ops;
        s.fallback = fallback == "error"   ? FallbackMode::kError
                     : fallback == "allow" ? FallbackMode::kAllow
                                           : FallbackMode::kWarn;
        s.dump_dir = dump_dir;
        set_settings(s);
        pjrt::RuntimeOptions options;
        options.plugin_path = plugin_path;
        options.client_options = pjrt::ClientOptions::cpu(cpu_devices);
        options.cache_dir = cache_dir;
        py::gil_scoped_release no_gil;
        init_runtime(options);
      },
      py::arg("plugin_path"), py::arg("cpu_devices"), py::arg("cache_dir"), py::arg("eager"),
      py::arg("fallback"), py::arg("dump_dir"), py::arg("fused_max_ops"));
  m.def("_set_eager_mode", [](const std::string& mode) { eager::set_eager_mode(eager_mode_named(mode)); });
  m.def("_eager_mode", [] {
    switch (settings().eager) {
      case EagerMode::kDebug: return "debug";
      case EagerMode::kFused: return "fused";
      default: return "strict";
    }
  });
  m.def("_fused_flush", [](const std::string& why, int device) { eager::flush(device, why); },
        py::arg("why"), py::arg("device") = -1);
  m.def("_fused_pending_ops", &eager::pending_ops);
  m.def("_set_init_error", &set_init_error);
  m.def("_synchronize", &synchronize, py::arg("device") = -1,
        py::call_guard<py::gil_scoped_release>());
  m.def("_memory_stats", [](int device) {
    MemoryCounters& c = memory_counters(device);
    py::dict out;
    out["allocated_bytes.all.current"] = c.allocated.load();
    out["allocated_bytes.all.peak"] = c.peak.load();
    out["allocation.all.allocated"] = c.allocations.load();
    // Nothing is cached: what is active or reserved is what is allocated.
    for (const char* kind : {"active_bytes", "reserved_bytes"}) {
      out[py::str(std::string(kind) + ".all.current")] = c.allocated.load();
      out[py::str(std::string(kind) + ".all.peak")] = c.peak.load();
    }
    out["num_alloc_retries"] = 0;
    out["num_ooms"] = 0;
    // The plugin's own view, where it reports one (TPU and GPU plugins do).
    if (runtime_initialized()) {
      if (auto stats = runtime().client()->device(device).memory_stats()) {
        out["bytes_in_use"] = stats->bytes_in_use;
        if (stats->bytes_limit) out["bytes_limit"] = *stats->bytes_limit;
        if (stats->peak_bytes_in_use) out["peak_bytes_in_use"] = *stats->peak_bytes_in_use;
      }
    }
    return out;
  });
  m.def("_reset_peak_memory", [](int device) {
    MemoryCounters& c = memory_counters(device);
    c.peak = c.allocated.load();
  });
  m.def("_lowered_ops", &ops::lowered_ops);
  // An op run through the CPU fallback on request (a decomposition that
  // would only call the op again, python/torch_pjrt/decompositions).
  m.def("_cpu_fallback", [](const std::string& name, const std::string& overload, py::args args,
                            const py::kwargs& kwargs) {
    c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    torch::jit::Stack stack =
        torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
    {
      py::gil_scoped_release release;
      cpu_fallback(op, &stack);
    }
    return torch::jit::createPyObjectForStack(std::move(stack));
  });
  m.def("_graph_lowered_ops", &ops::graph_lowered_ops);
  bind_graphs(m);
  kernels::bind_kernel_ops(m);
  m.def("_current_device", [] {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  });
  m.def("_set_current_device", [](int index) {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
        ->setDevice(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index)));
  });
  m.def("_default_generator", [](int index) {
    TORCH_CHECK(runtime_initialized() && index >= 0 &&
                    index < static_cast<int>(runtime().client()->devices().size()),
                "torch_pjrt: no device ", index);
    const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(index));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });
  m.def("_runtime_initialized", &runtime_initialized);
  // The mapping budget (eager/mapping_budget.h): tests lower the limit to
  // see least recently used programs released and compiled again.
  m.def("_process_mappings", &process_mappings);
  m.def("_mapping_limit", &mapping_limit);
  m.def("_set_mapping_limit", &set_mapping_limit, py::arg("limit"));
  m.def("_release_least_recent_programs", &release_least_recent_programs);
  m.def("_runtime_info", &runtime_info);
  m.def("_counters", &counters);
  m.def("_reset_counters", &reset_counters);
  m.def("_set_timeline", &set_timeline);
  m.def("_header_version", [] {
    auto v = pjrt::Plugin::header_version();
    return py::make_tuple(v.major, v.minor);
  });

  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "DeviceArray")
      .def_static("from_tensor", &buffer_from_tensor, py::arg("tensor"), py::arg("device") = 0,
                  "Copies a CPU tensor to a device (asynchronously).")
      .def("to_tensor", &buffer_to_tensor, "Copies the contents back into a new CPU tensor.")
      .def_property_readonly("shape", [](const Buffer& b) { return b.dims(); })
      .def_property_readonly("dtype",
                             [](const Buffer& b) {
                               return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
                                   torch::getTHPDtype(to_scalar_type(b.element_type()))));
                             })
      .def_property_readonly("device", [](const Buffer& b) { return device_index(b.device()); })
      .def_property_readonly("nbytes", &Buffer::byte_size)
      .def_property_readonly("is_deleted", &Buffer::is_deleted)
      .def(
          "block_until_ready",
          [](const Buffer& b) {
            b.ready_event().await_polling("buffer ready", pjrt::kHostSyncPoll);
          },
          py::call_guard<py::gil_scoped_release>());

  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def_property_readonly("name", &Executable::name)
      .def_property_readonly("num_outputs", &Executable::num_outputs)
      .def("serialize", [](const Executable& e) { return py::bytes(e.serialize()); })
      .def(
          "__call__",
          [](const Executable& exe, const std::vector<std::shared_ptr<Buffer>>& inputs,
             int device) {
            std::vector<const Buffer*> raw;
            for (const auto& input : inputs) {
              TORCH_CHECK(input != nullptr, "Executable: an input is None");
              raw.push_back(input.get());
            }
            const pjrt::Device& target = runtime().client()->device(device);
            py::gil_scoped_release no_gil;
            pjrt::ExecuteResult result = exe.execute(raw, target);
            std::vector<std::shared_ptr<Buffer>> outputs;
            for (auto& out : result.outputs) outputs.push_back(std::make_shared<Buffer>(std::move(out)));
            return outputs;
          },
          py::arg("inputs"), py::arg("device") = 0);

  m.def(
      "_compile",
      [](const std::string& mlir, bool portable) {
        pjrt::CompileOptions options;
        options.portable = portable;
        pjrt::CompileCache::Lookup lookup;
        {
          py::gil_scoped_release no_gil;
          lookup = runtime().cache().get_or_compile(mlir, options);
        }
        return py::make_tuple(lookup.executable, pjrt::cache_source_name(lookup.source),
                              lookup.seconds);
      },
      py::arg("mlir"), py::arg("portable") = true);
}

}  // namespace torch_pjrt::backend
