// Complex numbers and their parts: torch.complex(real, imag) and
// torch.polar(abs, angle) build them; angle reads the argument (of real
// numbers too: pi below zero, else 0).
#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

LoweringRegistrar registrar([] {
  // Complex numbers from parts: torch.complex(real, imag) and
  // torch.polar(abs, angle), float32 -> complex64 and float64 -> complex128.
  for (bool polar : {false, true}) {
    std::string name = polar ? "polar" : "complex";
    register_lowering("aten::" + name, [polar](LoweringContext& ctx) {
      c10::ScalarType a = ctx.dtype(0), c = ctx.dtype(1);
      auto part = [](c10::ScalarType t) {
        return t == at::kHalf || t == at::kFloat || t == at::kDouble;
      };
      TORCH_CHECK(part(a) && part(c), "Expected both inputs to be Half, Float or Double tensors but got ", a,
                  " and ", c);
      TORCH_CHECK(a == c, "Expected object of scalar type ", a, " but got scalar type ", c,
                  " for second argument");
      TORCH_CHECK(a != at::kHalf, "\"", polar ? "polar" : "complex",
                  "\" on tpu is not implemented for 'Half' (no complex32 support)");
      Builder& b = ctx.b;
      auto xs = promote_and_broadcast(b, {ctx.tensor(0), ctx.tensor(1)}, a);
      if (!polar) return std::vector<Value>{b.complex(xs[0], xs[1])};
      Value re = b.binary("multiply", xs[0], b.unary("cosine", xs[1]));
      Value im = b.binary("multiply", xs[0], b.unary("sine", xs[1]));
      return std::vector<Value>{b.complex(re, im)};
    }, {"aten::" + name + ".out"});
  }
  // angle(self): the argument of a complex number (its real type); for real
  // input pi below zero, else 0, NaN kept; integers and bool give floats.
  register_lowering("aten::angle", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    c10::ScalarType type = ctx.dtype(0);
    Value x = ctx.tensor(0);
    if (c10::isComplexType(type)) return std::vector<Value>{b.binary("atan2", b.imag(x), b.real(x))};
    c10::ScalarType out = float_type(type);
    x = convert(b, x, out);
    ElementType t = b.element_type(x);
    Value zero = b.zeros(b.type(x));
    Value pi = b.splat(b.constant(M_PI, t), b.dims(x));
    Value y = b.select(b.compare(x, zero, hlo::Compare::kLt), pi, zero);
    return std::vector<Value>{b.select(b.compare(x, x, hlo::Compare::kNe), x, y)};
  }, {"aten::angle.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
