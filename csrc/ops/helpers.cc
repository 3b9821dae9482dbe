#include "ops/helpers.h"

#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

namespace torch_pjrt::ops {

ElementType et(c10::ScalarType type) { return to_element_type(type); }

Value convert(Builder& b, Value v, c10::ScalarType type) { return b.convert(v, et(type)); }

c10::ScalarType result_type(const LoweringContext& ctx, std::initializer_list<size_t> args) {
  // torch's own promotion, fed with meta tensors of the arguments' kinds.
  at::native::ResultTypeState state;
  for (size_t i : args) {
    const LoweringArg& a = ctx.arg(i);
    if (a.kind == LoweringArg::Kind::kNone) continue;
    if (a.kind == LoweringArg::Kind::kStatic) {
      at::Tensor t = at::scalar_tensor(a.value.toScalar(), at::TensorOptions().device(at::kMeta));
      t.unsafeGetTensorImpl()->set_wrapped_number(true);
      state = at::native::update_result_type_state(t, state);
      continue;
    }
    int64_t rank = ctx.b.type(a.tensor).rank();
    at::Tensor t = at::empty(std::vector<int64_t>(rank, 1),
                             at::TensorOptions().dtype(a.dtype).device(at::kMeta));
    if (a.wrapped_number) t.unsafeGetTensorImpl()->set_wrapped_number(true);
    state = at::native::update_result_type_state(t, state);
  }
  return at::native::result_type(state);
}

c10::ScalarType float_type(c10::ScalarType type) {
  if (c10::isFloatingType(type) || c10::isComplexType(type)) return type;
  return c10::typeMetaToScalarType(c10::get_default_dtype());
}

c10::ScalarType opmath_type(c10::ScalarType type) {
  return (type == at::kHalf || type == at::kBFloat16) ? at::kFloat : type;
}

std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TORCH_CHECK(da == db || da == 1 || db == 1, "The size of tensor a (", da,
                ") must match the size of tensor b (", db, ") at non-singleton dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value broadcast_to(Builder& b, Value v, const std::vector<int64_t>& dims) {
  const auto& in = b.dims(v);
  if (in == dims) return v;
  TORCH_CHECK(in.size() <= dims.size(), "torch_pjrt: cannot broadcast rank ", in.size(),
              " to rank ", dims.size());
  std::vector<int64_t> mapping;
  size_t lead = dims.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) mapping.push_back(static_cast<int64_t>(lead + i));
  return b.broadcast_in_dim(v, dims, mapping);
}

std::vector<Value> promote_and_broadcast(Builder& b, const std::vector<Value>& values,
                                         c10::ScalarType type) {
  std::vector<int64_t> shape;
  for (Value v : values) shape = broadcast_shape(shape, b.dims(v));
  std::vector<Value> out;
  for (Value v : values) out.push_back(broadcast_to(b, convert(b, v, type), shape));
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t rank) { return c10::maybe_wrap_dim(dim, rank); }

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank);
    TORCH_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "dim ", w,
                " appears multiple times in the list of dims");
    out.push_back(w);
  }
  return out;
}

Value reduce_init(Builder& b, ElementType type, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return b.constant(0, type);
    case ReduceKind::kProd: return b.constant(1, type);
    case ReduceKind::kAnd: return b.constant_int(1, type);
    case ReduceKind::kOr: return b.constant_int(0, type);
    case ReduceKind::kMax:
    case ReduceKind::kMin: {
      bool max = kind == ReduceKind::kMax;
      if (hlo::is_float(type)) {
        double inf = std::numeric_limits<double>::infinity();
        return b.constant(max ? -inf : inf, type);
      }
      if (type == ElementType::kPred) return b.constant_bool(!max);
      int64_t bits = static_cast<int64_t>(pjrt::byte_width(type)) * 8;
      if (hlo::is_unsigned_int(type)) {
        // Unsigned max as a bit pattern of all ones (-1 in two's complement).
        return max ? b.constant_int(0, type) : b.constant_int(-1, type);
      }
      int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
      int64_t lo = bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
      return b.constant_int(max ? lo : hi, type);
    }
  }
  return b.constant(0, type);
}

std::vector<int64_t> all_dims(int64_t rank) {
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) dims[i] = i;
  return dims;
}

Value reduce(Builder& b, Value x, const std::vector<int64_t>& dims, ReduceKind kind) {
  ElementType type = b.element_type(x);
  if (dims.empty()) return x;
  const char* op = kind == ReduceKind::kSum    ? "add"
                   : kind == ReduceKind::kProd ? "multiply"
                   : kind == ReduceKind::kMax  ? "maximum"
                   : kind == ReduceKind::kMin  ? "minimum"
                   : kind == ReduceKind::kAnd  ? "and"
                                               : "or";
  return b.reduce({x}, {reduce_init(b, type, kind)}, dims,
                  [op](Builder& r, const std::vector<Value>& a) {
                    return std::vector<Value>{r.binary(op, a[0], a[1])};
                  })[0];
}

Value keep_dims(Builder& b, Value reduced, const std::vector<int64_t>& input_dims,
                const std::vector<int64_t>& reduced_dims) {
  std::vector<int64_t> shape = input_dims;
  for (int64_t d : reduced_dims) shape[d] = 1;
  return b.reshape(reduced, shape);
}

}  // namespace torch_pjrt::ops

namespace torch_pjrt::ops {

Value expand_reduced(Builder& b, Value reduced, const std::vector<int64_t>& input_dims,
                     const std::vector<int64_t>& reduced_dims) {
  return broadcast_to(b, keep_dims(b, reduced, input_dims, reduced_dims), input_dims);
}

}  // namespace torch_pjrt::ops
