#include "kernels/kernel_ops.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "eager/op_kernel.h"
#include "hlo/builder.h"
#include "ops/dtypes.h"
#include "ops/lowering.h"

namespace py = pybind11;

namespace torch_pjrt::kernels {
namespace {

// The dispatcher registrations, one IMPL library per namespace, kept for
// the life of the process (the ops they implement are never removed).
void register_eager_kernel(const std::string& qualified) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<torch::Library>> libraries;
  size_t sep = qualified.find("::");
  TORCH_CHECK(sep != std::string::npos && sep > 0, "torch_pjrt: kernel op name '", qualified,
              "' is not of the form 'namespace::name'");
  std::string ns = qualified.substr(0, sep);
  std::lock_guard<std::mutex> lock(mu);
  auto& library = libraries[ns];
  if (!library) {
    library = std::make_unique<torch::Library>(torch::Library::IMPL, ns,
                                               c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  }
  library->impl(qualified.substr(sep + 2).c_str(),
                torch::CppFunction::makeFromBoxedFunction<&backend::run_lowered_op>());
}

hlo::TensorType tensor_type(const py::handle& desc) {
  auto t = desc.cast<py::tuple>();
  auto dtype = torch::python::detail::py_object_to_dtype(t[0]);
  return hlo::TensorType{ops::to_element_type(dtype), t[1].cast<std::vector<int64_t>>()};
}

py::tuple describe(const hlo::TensorType& t, c10::ScalarType dtype) {
  auto* object = reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype));
  return py::make_tuple(py::reinterpret_borrow<py::object>(object), py::cast(t.dims));
}

// The lowering of a kernel op: the tensors (in schema order) become the
// kernel function's arguments; static arguments go to `lower`, which picks
// (or lowers) the kernel for these types and returns
// (symbol, text, [(dtype, dims)] results).
std::vector<hlo::Value> lower_kernel(ops::LoweringContext& ctx, py::handle lower) {
  std::vector<hlo::Value> operands;
  std::vector<hlo::TensorType> params;
  std::shared_ptr<hlo::ExternalFunction> fn;
  {
    py::gil_scoped_acquire gil;
    py::list args;
    for (size_t i = 0; i < ctx.num_args(); ++i) {
      const ops::LoweringArg& a = ctx.arg(i);
      switch (a.kind) {
        case ops::LoweringArg::Kind::kTensor:
          operands.push_back(a.tensor);
          params.push_back(ctx.b.type(a.tensor));
          args.append(describe(ctx.b.type(a.tensor), a.dtype));
          break;
        case ops::LoweringArg::Kind::kStatic:
          args.append(torch::jit::toPyObject(a.value));
          break;
        case ops::LoweringArg::Kind::kNone:
          args.append(py::none());
          break;
        default:
          TORCH_CHECK(false, ctx.op(), ": argument ", i,
                      " is a tensor list or a runtime scalar, which kernel ops do not take");
      }
    }
    // A Python exception raised by `lower` (a mistyped argument) reaches
    // the caller with its own type and message.
    py::tuple made = lower(args).cast<py::tuple>();
    fn = std::make_shared<hlo::ExternalFunction>();
    fn->symbol = made[0].cast<std::string>();
    fn->text = made[1].cast<std::string>();
    fn->parameters = params;
    for (const auto& r : made[2].cast<py::list>()) fn->results.push_back(tensor_type(r));
  }
  return ctx.b.call(fn, operands);
}

}  // namespace

void bind_kernel_ops(py::module& m) {
  // _register_kernel_op(name, lower, static_scalars): `name` is the
  // torch.library op ("ns::op" or "ns::op.overload", already defined);
  // `static_scalars` lists the Scalar/float arguments whose values are
  // passed to `lower` instead of as runtime parameters.
  m.def("_register_kernel_op", [](const std::string& name, py::object lower,
                                  std::vector<int> static_scalars) {
    TORCH_CHECK(!ops::find_lowering(name), "torch_pjrt: a lowering for ", name,
                " is already registered");
    // A borrowed handle: the Python side keeps `lower` alive for the life of
    // the process (torch_pjrt.kernels._custom_op), so the static lowering
    // table never has to release a Python object after the interpreter.
    py::handle held = lower;
    ops::register_lowering(name, [held](ops::LoweringContext& ctx) {
      return lower_kernel(ctx, held);  // touched only under the GIL, inside
    }, {}, std::move(static_scalars));
    size_t dot = name.find('.', name.find("::"));
    register_eager_kernel(dot == std::string::npos ? name : name.substr(0, dot));
  });
}

}  // namespace torch_pjrt::kernels
