// Matrix products: mm, bmm, addmm, baddbmm (and their out_dtype forms), addbmm, dot, mv,
// addmv, _int_mm. matmul and
// linear are composites in torch and reach these.
#include <c10/util/Exception.h>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

void check_same_dtype(const LoweringContext& ctx, size_t a, size_t b, const char* op) {
  TORCH_CHECK(ctx.dtype(a) == ctx.dtype(b), "expected m1 and m2 to have the same dtype, but got: ",
              ctx.dtype(a), " != ", ctx.dtype(b));
  (void)op;
}

// Matmul accumulates in f32 for bf16/f16 inputs; `round` converts back
// (addmm rounds only after adding the bias).
Value product(Builder& b, Value x, Value y, const std::vector<int64_t>& batch,
              int64_t contract_x, int64_t contract_y, c10::ScalarType type, bool round = true) {
  Value r = b.dot_general(x, y, batch, batch, {contract_x}, {contract_y}, et(opmath_type(type)));
  return round ? convert(b, r, type) : r;
}

Value mm(LoweringContext& ctx, Value x, Value y, size_t xi, size_t yi, bool round = true) {
  Builder& b = ctx.b;
  TORCH_CHECK(b.type(x).rank() == 2, "self must be a matrix");
  TORCH_CHECK(b.type(y).rank() == 2, "mat2 must be a matrix");
  check_same_dtype(ctx, xi, yi, "mm");
  TORCH_CHECK(b.dims(x)[1] == b.dims(y)[0], "mat1 and mat2 shapes cannot be multiplied (",
              b.dims(x)[0], "x", b.dims(x)[1], " and ", b.dims(y)[0], "x", b.dims(y)[1], ")");
  return product(b, x, y, {}, 1, 0, ctx.dtype(xi), round);
}

Value bmm(LoweringContext& ctx, Value x, Value y, size_t xi, size_t yi, bool round = true) {
  Builder& b = ctx.b;
  TORCH_CHECK(b.type(x).rank() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b.type(y).rank() == 3, "batch2 must be a 3D tensor");
  check_same_dtype(ctx, xi, yi, "bmm");
  const auto& dx = b.dims(x);
  const auto& dy = b.dims(y);
  TORCH_CHECK(dx[0] == dy[0], "batch1 and batch2 must have same number of batches, got ", dx[0],
              " and ", dy[0]);
  TORCH_CHECK(dx[2] == dy[1], "Expected size for first two dimensions of batch2 tensor to be: [",
              dx[0], ", ", dx[2], "] but got: [", dy[0], ", ", dy[1], "].");
  return product(b, x, y, {0}, 2, 1, ctx.dtype(xi), round);
}

// beta * input + alpha * product, with beta == 0 ignoring NaNs in input.
Value scale_add(LoweringContext& ctx, Value input, Value prod, size_t beta, size_t alpha) {
  Builder& b = ctx.b;
  ElementType t = b.element_type(prod);
  Value in = broadcast_to(b, b.convert(input, t), b.dims(prod));
  Value scaled_prod = b.binary("multiply", b.splat(ctx.scalar(alpha, t), b.dims(prod)), prod);
  Value beta_v = b.splat(ctx.scalar(beta, t), b.dims(prod));
  Value scaled_in = b.binary("multiply", beta_v, in);
  Value beta_zero = b.compare(beta_v, b.zeros(TensorType{t, b.dims(prod)}), hlo::Compare::kEq);
  scaled_in = b.select(beta_zero, b.zeros(TensorType{t, b.dims(prod)}), scaled_in);
  return b.binary("add", scaled_in, scaled_prod);
}

// The out_dtype forms (mm.dtype, bmm.dtype, addmm.dtype, baddbmm.dtype):
// products accumulated in float32 and returned in out_dtype, which must be
// the inputs' dtype or float32 for float16/bfloat16 inputs, as on CUDA (the
// only backend torch implements them for).
c10::ScalarType out_dtype(LoweringContext& ctx, size_t arg, size_t input, const char* op) {
  c10::ScalarType out = ctx.ivalue(arg).toScalarType();
  c10::ScalarType in = ctx.dtype(input);
  TORCH_CHECK(out == in || (out == at::kFloat && (in == at::kHalf || in == at::kBFloat16)), op,
              ": out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs, got ", out,
              " for ", in, " inputs");
  return out;
}

void register_out_dtype_products() {
  register_lowering("aten::mm.dtype", [](LoweringContext& ctx) {
    c10::ScalarType out = out_dtype(ctx, 2, 0, "mm");
    return std::vector<Value>{convert(ctx.b, mm(ctx, ctx.tensor(0), ctx.tensor(1), 0, 1, false), out)};
  }, {"aten::mm.dtype_out"});
  register_lowering("aten::bmm.dtype", [](LoweringContext& ctx) {
    c10::ScalarType out = out_dtype(ctx, 2, 0, "bmm");
    return std::vector<Value>{convert(ctx.b, bmm(ctx, ctx.tensor(0), ctx.tensor(1), 0, 1, false), out)};
  }, {"aten::bmm.dtype_out"});
  register_lowering("aten::addmm.dtype", [](LoweringContext& ctx) {
    c10::ScalarType out = out_dtype(ctx, 3, 1, "addmm");
    Value prod = mm(ctx, ctx.tensor(1), ctx.tensor(2), 1, 2, false);
    return std::vector<Value>{convert(ctx.b, scale_add(ctx, ctx.tensor(0), prod, 4, 5), out)};
  }, {"aten::addmm.dtype_out"});
  register_lowering("aten::baddbmm.dtype", [](LoweringContext& ctx) {
    c10::ScalarType out = out_dtype(ctx, 3, 1, "baddbmm");
    Value prod = bmm(ctx, ctx.tensor(1), ctx.tensor(2), 1, 2, false);
    return std::vector<Value>{convert(ctx.b, scale_add(ctx, ctx.tensor(0), prod, 4, 5), out)};
  }, {"aten::baddbmm.dtype_out"});
}

LoweringRegistrar registrar([] {
  register_out_dtype_products();
  register_lowering("aten::mm", [](LoweringContext& ctx) {
    return std::vector<Value>{mm(ctx, ctx.tensor(0), ctx.tensor(1), 0, 1)};
  }, {"aten::mm.out"});
  // _int_mm(self, mat2): int8 (or uint8) x int8 products accumulated in int32 (torchao's
  // dynamic int8 quantization), with the CPU kernel's checks.
  register_lowering("aten::_int_mm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0), y = ctx.tensor(1);
    TORCH_CHECK(b.type(x).rank() == 2, "_int_mm: Expected self to be 2D, but got ", b.type(x).rank(), "D");
    TORCH_CHECK(b.type(y).rank() == 2, "_int_mm: Expected mat2 to be 2D, but got ", b.type(y).rank(), "D");
    TORCH_CHECK(b.dims(x)[1] == b.dims(y)[0], "_int_mm: self.size(1) needs to match mat2.size(0), but got ",
                b.dims(x)[1], " and ", b.dims(y)[0]);
    TORCH_CHECK(ctx.dtype(0) == at::kChar || ctx.dtype(0) == at::kByte,
                "_int_mm: Expected self dtype to be int8 or uint8 but got ", ctx.dtype(0));
    TORCH_CHECK(ctx.dtype(1) == at::kChar, "_int_mm: Expected mat2 dtype to be of type int8 but got ",
                ctx.dtype(1));
    // int8 operands stay int8 (an int8 product where the chip has one);
    // a uint8 self is widened first, keeping its values (0..255).
    if (ctx.dtype(0) == at::kByte) {
      x = b.convert(x, ElementType::kS32);
      y = b.convert(y, ElementType::kS32);
    }
    return std::vector<Value>{b.dot_general(x, y, {}, {}, {1}, {0}, ElementType::kS32)};
  }, {"aten::_int_mm.out"});
  register_lowering("aten::bmm", [](LoweringContext& ctx) {
    return std::vector<Value>{bmm(ctx, ctx.tensor(0), ctx.tensor(1), 0, 1)};
  }, {"aten::bmm.out"});
  register_lowering("aten::addmm", [](LoweringContext& ctx) {
    Value prod = mm(ctx, ctx.tensor(1), ctx.tensor(2), 1, 2, /*round=*/false);
    return std::vector<Value>{convert(ctx.b, scale_add(ctx, ctx.tensor(0), prod, 3, 4), ctx.dtype(1))};
  }, {"aten::addmm_", "aten::addmm.out"});
  register_lowering("aten::baddbmm", [](LoweringContext& ctx) {
    Value prod = bmm(ctx, ctx.tensor(1), ctx.tensor(2), 1, 2, /*round=*/false);
    return std::vector<Value>{convert(ctx.b, scale_add(ctx, ctx.tensor(0), prod, 3, 4), ctx.dtype(1))};
  }, {"aten::baddbmm_", "aten::baddbmm.out"});
  // addbmm(self, batch1, batch2, beta, alpha): the batch of products summed,
  // one contraction over the batch and inner dims.
  register_lowering("aten::addbmm", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(1), y = ctx.tensor(2);
    TORCH_CHECK(b.type(x).rank() == 3, "batch1 must be a 3D tensor");
    TORCH_CHECK(b.type(y).rank() == 3, "batch2 must be a 3D tensor");
    check_same_dtype(ctx, 1, 2, "addbmm");
    const auto& dx = b.dims(x);
    const auto& dy = b.dims(y);
    TORCH_CHECK(dx[0] == dy[0], "batch1 and batch2 must have same number of batches, got ", dx[0], " and ",
                dy[0]);
    TORCH_CHECK(dx[2] == dy[1], "Incompatible matrix sizes for bmm (", dx[1], "x", dx[2], " and ", dy[1], "x",
                dy[2], ")");
    Value prod = b.dot_general(x, y, {}, {}, {0, 2}, {0, 1}, et(opmath_type(ctx.dtype(1))));
    std::vector<int64_t> out = b.dims(prod);
    std::vector<int64_t> self = b.dims(ctx.tensor(0));
    TORCH_CHECK(broadcast_shape(self, out) == out, "The expanded size of the tensor (", out.back(),
                ") must match the existing size (", self.back(), ") at non-singleton dimension ",
                self.size() - 1, ".  Target sizes: ", c10::IntArrayRef(out), ".  Tensor sizes: ",
                c10::IntArrayRef(self));
    return std::vector<Value>{convert(b, scale_add(ctx, ctx.tensor(0), prod, 3, 4), ctx.dtype(1))};
  }, {"aten::addbmm_", "aten::addbmm.out"});
  register_lowering("aten::dot", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0), y = ctx.tensor(1);
    TORCH_CHECK(b.type(x).rank() == 1 && b.type(y).rank() == 1,
                "1D tensors expected, but got ", b.type(x).rank(), "D and ", b.type(y).rank(),
                "D tensors");
    TORCH_CHECK(ctx.dtype(0) == ctx.dtype(1), "dot : expected both vectors to have same dtype, "
                "but found ", ctx.dtype(0), " and ", ctx.dtype(1));
    TORCH_CHECK(b.dims(x)[0] == b.dims(y)[0], "inconsistent tensor size, expected tensor [",
                b.dims(x)[0], "] and src [", b.dims(y)[0],
                "] to have the same number of elements, but got ", b.dims(x)[0], " and ",
                b.dims(y)[0], " elements respectively");
    return std::vector<Value>{product(b, x, y, {}, 0, 0, ctx.dtype(0))};
  }, {"aten::dot.out"});
  register_lowering("aten::mv", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value m = ctx.tensor(0), v = ctx.tensor(1);
    TORCH_CHECK(b.type(m).rank() == 2 && b.type(v).rank() == 1,
                "vector + matrix @ vector expected, got ", b.type(m).rank(), ", ", b.type(v).rank());
    TORCH_CHECK(b.dims(m)[1] == b.dims(v)[0], "size mismatch, got input (", b.dims(m)[0],
                "), mat (", b.dims(m)[0], "x", b.dims(m)[1], "), vec (", b.dims(v)[0], ")");
    return std::vector<Value>{product(b, m, v, {}, 1, 0, ctx.dtype(0))};
  }, {"aten::mv.out"});
});

}  // namespace
}  // namespace torch_pjrt::ops
