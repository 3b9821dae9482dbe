// torch_pjrt._C._distributed: the tpu c10d backend as a subclass of
// torch._C._distributed_c10d.Backend, so ProcessGroup, DeviceMesh, DTensor
// and FSDP2 use it like any built-in backend.
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/backend.h"

namespace py = pybind11;

namespace torch_pjrt::distributed {

void init_bindings(py::module& parent) {
  // The base class must be registered before a subclass names it.
  py::module_::import("torch._C._distributed_c10d");
  py::module m = parent.def_submodule("_distributed", "The tpu c10d backend");
  py::class_<TpuBackend, c10d::Backend, c10::intrusive_ptr<TpuBackend>>(m, "TpuBackend")
      .def(py::init(&TpuBackend::create), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::arg("make_host"),
           "Joins the group through `store`: XLA collectives when every rank lives in this "
           "process, otherwise the host transport built by make_host(store, rank, size, timeout).")
      .def_property_readonly("transport", &TpuBackend::transport_name,
                             "'xla' (collective programs) or 'host' (device -> host -> gloo)")
      // split_group deep-copies the parent's `options` when none are given;
      // c10d's generic Options cannot be deep-copied in Python, and None
      // makes ProcessGroup::splitGroup clone them in C++ instead.
      .def_property_readonly("options", [](TpuBackend&) { return py::none(); })
      // Ranks outside a new group call this on the parent when groups are
      // split from a bound device; joining needs nothing from them.
      .def("perform_nocolor_split", [](TpuBackend&, const at::Device&) {});
  m.def("counters", [] {
    py::dict out, calls;
    for (const auto& [name, n] : call_counts()) calls[py::str(name)] = n;
    out["calls"] = calls;
    out["bytes"] = call_bytes();
    return out;
  });
  m.def("reset_counters", &reset_call_counts);
}

}  // namespace torch_pjrt::distributed
