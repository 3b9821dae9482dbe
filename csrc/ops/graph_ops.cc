// Lowerings that only compiled graphs need. In eager mode views, clones,
// dtype copies and factories are storage operations (a view is metadata over
// the same buffer); in a functional graph they are values like any other, so
// here they become reshape, transpose, broadcast, slice and convert. Ops that
// eager mode already lowers under another name (batch norm's functional
// form, embedding) delegate to that lowering: one implementation per op.
#include <ATen/InferSize.h>
#include <c10/core/MemoryFormat.h>
#include <c10/util/Exception.h>

#include <numeric>

#include "ops/helpers.h"

namespace torch_pjrt::ops {
namespace {

Value view(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  // torch's own rule for -1 and its error for a size that does not fit.
  return ctx.b.reshape(x, at::infer_size(ctx.int_list(1), ctx.b.type(x).numel()));
}

std::vector<int64_t> squeeze_dims(Builder& b, Value x, const std::vector<int64_t>& dims) {
  const auto& in = b.dims(x);
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool listed = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!(listed && in[d] == 1)) out.push_back(in[d]);
  }
  return out;
}

// torch's slice bounds: clamp to [0, size], negative from the end.
std::pair<int64_t, int64_t> slice_bounds(std::optional<int64_t> start, std::optional<int64_t> end,
                                         int64_t size) {
  int64_t s = start.value_or(0), e = end.value_or(size);
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, s, size);
  return {s, e};
}

struct SliceSpec {
  int64_t dim, start, end, step;
};

// A slice's (dim, start, end, step) from arguments at `dim_arg`.. as torch
// reads them: dim wrapped, bounds clamped, a positive step.
SliceSpec slice_spec(LoweringContext& ctx, Value x, size_t dim_arg) {
  const auto& dims = ctx.b.dims(x);
  int64_t dim = wrap_dim(ctx.int_arg(dim_arg), static_cast<int64_t>(dims.size()));
  int64_t step = ctx.int_arg(dim_arg + 3);
  TORCH_CHECK(step > 0, "slice step must be positive");
  auto [start, end] = slice_bounds(ctx.optional_int(dim_arg + 1), ctx.optional_int(dim_arg + 2),
                                   dims[dim]);
  return {dim, start, end, step};
}

Value slice_value(Builder& b, Value x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto dims = b.dims(x);
  std::vector<int64_t> lo(dims.size(), 0), hi = dims, strides(dims.size(), 1);
  lo[dim] = start;
  hi[dim] = end;
  strides[dim] = step;
  return b.slice(x, lo, hi, strides);
}

// Writes `src` into `self` at positions start, start+step, ... < end of `dim`.
Value slice_scatter(LoweringContext& ctx, Value self, Value src, int64_t dim, int64_t start,
                    int64_t end, int64_t step) {
  Builder& b = ctx.b;
  auto dims = b.dims(self);
  int64_t count = end > start ? (end - start + step - 1) / step : 0;
  std::vector<int64_t> expected = dims;
  expected[dim] = count;
  TORCH_CHECK(b.dims(src) == expected, ctx.op(), ": expected src to have a size equal to the slice "
              "of self. src size = ", c10::IntArrayRef(b.dims(src)), ", slice size = ",
              c10::IntArrayRef(expected));
  src = b.convert(src, b.element_type(self));
  if (count == 0) return self;
  if (step == 1) {
    std::vector<Value> starts;
    for (size_t d = 0; d < dims.size(); ++d) {
      starts.push_back(b.constant_int(static_cast<int64_t>(d) == dim ? start : 0, ElementType::kS64));
    }
    return b.dynamic_update_slice(self, src, starts);
  }
  // Strided: spread src with interior padding, then select by a mask.
  std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0), interior(dims.size(), 0);
  low[dim] = start;
  interior[dim] = step - 1;
  high[dim] = dims[dim] - (start + (count - 1) * step + 1);
  Value zero = b.zeros(TensorType{b.element_type(self), {}});
  Value spread = b.pad(src, zero, low, high, interior);
  Value mask_src = b.splat(b.constant_bool(true), b.dims(src));
  Value mask = b.pad(mask_src, b.constant_bool(false), low, high, interior);
  return b.select(mask, spread, self);
}

Value identity(LoweringContext& ctx) { return ctx.tensor(0); }

// A select's (dim, index) on `x`, wrapped and checked as torch does.
std::pair<int64_t, int64_t> select_position(LoweringContext& ctx, Value x, size_t dim_arg,
                                            const char* name) {
  const auto& dims = ctx.b.dims(x);
  int64_t dim = wrap_dim(ctx.int_arg(dim_arg), static_cast<int64_t>(dims.size()));
  int64_t size = dims[dim], index = ctx.int_arg(dim_arg + 1);
  TORCH_CHECK_INDEX(index >= -size && index < size, name, "(): index ", index,
                    " out of range for tensor of size ", c10::IntArrayRef(dims), " at dimension ",
                    dim);
  return {dim, index < 0 ? index + size : index};
}

c10::ScalarType factory_dtype(LoweringContext& ctx, size_t dtype_arg, c10::ScalarType fallback) {
  if (auto d = ctx.optional_dtype(dtype_arg)) return *d;
  return fallback;
}

c10::ScalarType default_for_scalar(const LoweringArg& a) {
  if (a.kind == LoweringArg::Kind::kScalar) {
    if (a.dtype == c10::kDouble) return c10::typeMetaToScalarType(c10::get_default_dtype());
    return a.dtype;
  }
  return c10::typeMetaToScalarType(c10::get_default_dtype());
}

LoweringRegistrar registrar([] {
  register_graph_lowering("aten::view", [](LoweringContext& ctx) {
    return std::vector<Value>{view(ctx)};
  }, {"aten::_unsafe_view", "aten::reshape", "aten::view_copy", "aten::_reshape_alias_copy"});

  register_graph_lowering("aten::permute", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    auto perm = wrap_dims(ctx.int_list(1), ctx.b.type(x).rank());
    return std::vector<Value>{ctx.b.transpose(x, perm)};
  }, {"aten::permute_copy"});

  register_graph_lowering("aten::transpose.int", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    if (rank == 0) return std::vector<Value>{x};
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[wrap_dim(ctx.int_arg(1), rank)], perm[wrap_dim(ctx.int_arg(2), rank)]);
    return std::vector<Value>{ctx.b.transpose(x, perm)};
  }, {"aten::transpose_copy.int"});

  register_graph_lowering("aten::t", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    TORCH_CHECK(rank <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", rank, "D");
    return std::vector<Value>{rank < 2 ? x : ctx.b.transpose(x, {1, 0})};
  }, {"aten::t_copy"});

  register_graph_lowering("aten::expand", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto size = ctx.int_list(1);
    const auto& in = b.dims(x);
    int64_t lead = static_cast<int64_t>(size.size()) - static_cast<int64_t>(in.size());
    TORCH_CHECK(lead >= 0, "expand: the number of sizes provided (", size.size(),
                ") must be greater or equal to the number of dimensions in the tensor (", in.size(), ")");
    for (size_t i = 0; i < in.size(); ++i) {
      int64_t& target = size[lead + i];
      if (target == -1) target = in[i];
      TORCH_CHECK(in[i] == 1 || in[i] == target, "The expanded size of the tensor (", target,
                  ") must match the existing size (", in[i], ") at non-singleton dimension ", lead + i);
    }
    return std::vector<Value>{broadcast_to(b, x, size)};
  }, {"aten::expand_copy"});

  register_graph_lowering("aten::slice.Tensor", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    SliceSpec s = slice_spec(ctx, x, 1);
    return std::vector<Value>{slice_value(ctx.b, x, s.dim, s.start, s.end, s.step)};
  }, {"aten::slice_copy.Tensor"});

  register_graph_lowering("aten::select.int", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto [dim, index] = select_position(ctx, x, 1, "select");
    auto out_dims = b.dims(x);
    out_dims.erase(out_dims.begin() + dim);
    return std::vector<Value>{b.reshape(slice_value(b, x, dim, index, index + 1, 1), out_dims)};
  }, {"aten::select_copy.int"});

  register_graph_lowering("aten::unsqueeze", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    auto dims = ctx.b.dims(x);
    int64_t d = wrap_dim(ctx.int_arg(1), static_cast<int64_t>(dims.size()) + 1);
    dims.insert(dims.begin() + d, 1);
    return std::vector<Value>{ctx.b.reshape(x, dims)};
  }, {"aten::unsqueeze_copy"});

  register_graph_lowering("aten::squeeze", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    return std::vector<Value>{ctx.b.reshape(x, squeeze_dims(ctx.b, x, {}))};
  }, {"aten::squeeze_copy"});
  register_graph_lowering("aten::squeeze.dim", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    if (rank == 0) return std::vector<Value>{x};
    return std::vector<Value>{
        ctx.b.reshape(x, squeeze_dims(ctx.b, x, {wrap_dim(ctx.int_arg(1), rank)}))};
  }, {"aten::squeeze_copy.dim"});
  register_graph_lowering("aten::squeeze.dims", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    if (rank == 0) return std::vector<Value>{x};
    auto dims = wrap_dims(ctx.int_list(1), rank);
    if (dims.empty()) return std::vector<Value>{x};
    return std::vector<Value>{ctx.b.reshape(x, squeeze_dims(ctx.b, x, dims))};
  }, {"aten::squeeze_copy.dims"});

  register_graph_lowering("aten::clone", [](LoweringContext& ctx) {
    return std::vector<Value>{identity(ctx)};
  }, {"aten::alias", "aten::detach", "aten::lift_fresh_copy", "aten::alias_copy",
      "aten::detach_copy", "aten::lift_fresh", "aten::contiguous"});

  // _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format)
  register_graph_lowering("aten::_to_copy", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    if (auto dtype = ctx.optional_dtype(1)) x = convert(ctx.b, x, *dtype);
    return std::vector<Value>{x};
  });

  // copy(self, src, non_blocking): src in self's shape and dtype.
  register_graph_lowering("aten::copy", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value src = convert(b, ctx.tensor(1), ctx.dtype(0));
    return std::vector<Value>{broadcast_to(b, src, b.dims(ctx.tensor(0)))};
  });

  // scalar_tensor(s, *, dtype, layout, device, pin_memory)
  register_graph_lowering("aten::scalar_tensor", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 1, c10::typeMetaToScalarType(c10::get_default_dtype()));
    return std::vector<Value>{ctx.scalar(0, et(type))};
  });

  // full(size, fill_value, *, dtype, layout, device, pin_memory)
  register_graph_lowering("aten::full", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 2, default_for_scalar(ctx.arg(1)));
    return std::vector<Value>{ctx.b.splat(ctx.scalar(1, et(type)), ctx.int_list(0))};
  });
  // empty / zeros / ones (size, *, dtype, layout, device, pin_memory[, memory_format]):
  // an empty tensor's contents are undefined; zeros are as good as any.
  auto factory = [](double fill) {
    return [fill](LoweringContext& ctx) {
      c10::ScalarType type = factory_dtype(ctx, 1, c10::typeMetaToScalarType(c10::get_default_dtype()));
      return std::vector<Value>{ctx.b.splat(ctx.b.constant(fill, et(type)), ctx.int_list(0))};
    };
  };
  register_graph_lowering("aten::empty.memory_format", factory(0), {"aten::zeros"});
  register_graph_lowering("aten::ones", factory(1));
  // empty_strided(size, stride, *, dtype, ...)
  register_graph_lowering("aten::empty_strided", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 2, c10::typeMetaToScalarType(c10::get_default_dtype()));
    return std::vector<Value>{ctx.b.zeros(TensorType{et(type), ctx.int_list(0)})};
  });

  // empty_permuted(size, physical_layout, *, dtype, ...): a graph value has
  // no physical layout to choose.
  register_graph_lowering("aten::empty_permuted", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 2, c10::typeMetaToScalarType(c10::get_default_dtype()));
    return std::vector<Value>{ctx.b.zeros(TensorType{et(type), ctx.int_list(0)})};
  });

  // view.dtype(self, dtype): the same bytes read as another dtype. A
  // narrower type multiplies the last dim by the width ratio and a wider
  // one divides it, as torch's view does; bool goes through uint8 (XLA
  // does not bitcast predicates).
  register_graph_lowering("aten::view.dtype", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    c10::ScalarType from_type = ctx.dtype(0);
    auto requested = ctx.optional_dtype(1);
    TORCH_CHECK(requested.has_value(), "view.dtype: no dtype given");
    c10::ScalarType to_type = *requested;
    TORCH_CHECK(!c10::isComplexType(from_type) && !c10::isComplexType(to_type),
                "torch_pjrt: view(dtype) of complex tensors is not lowered in graphs");
    if (from_type == c10::kBool) x = b.convert(x, ElementType::kU8);
    ElementType to = to_type == c10::kBool ? ElementType::kU8 : et(to_type);
    size_t from_width = pjrt::byte_width(b.element_type(x)), to_width = pjrt::byte_width(to);
    std::vector<int64_t> dims = b.dims(x);
    TORCH_CHECK(from_width == to_width || !dims.empty(),
                "self.dim() cannot be 0 to view ", from_type, " as ", to_type, " (different element sizes)");
    Value out;
    if (to_width < from_width) {
      out = b.bitcast_convert(x, to);  // [..., n, ratio]
      std::vector<int64_t> flat = dims;
      flat.back() *= static_cast<int64_t>(from_width / to_width);
      out = b.reshape(out, flat);
    } else if (to_width > from_width) {
      int64_t ratio = static_cast<int64_t>(to_width / from_width);
      TORCH_CHECK(dims.back() % ratio == 0, "self.size(-1) must be divisible by ", ratio,
                  " to view ", from_type, " as ", to_type, " (different element sizes), but got ",
                  dims.back());
      std::vector<int64_t> split = dims;
      split.back() /= ratio;
      split.push_back(ratio);
      out = b.bitcast_convert(b.reshape(x, split), to);
    } else {
      out = b.bitcast_convert(x, to);
    }
    if (to_type == c10::kBool) out = b.compare(out, b.zeros(b.type(out)), hlo::Compare::kNe);
    return std::vector<Value>{out};
  });

  // full_like(self, fill_value, *, dtype, layout, device, pin_memory, memory_format)
  register_graph_lowering("aten::full_like", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 2, ctx.dtype(0));
    return std::vector<Value>{ctx.b.splat(ctx.scalar(1, et(type)), ctx.b.dims(ctx.tensor(0)))};
  });
  // zeros_like / ones_like / empty_like(self, *, dtype, layout, device, pin_memory, memory_format)
  auto like = [](double fill) {
    return [fill](LoweringContext& ctx) {
      c10::ScalarType type = factory_dtype(ctx, 1, ctx.dtype(0));
      return std::vector<Value>{ctx.b.splat(ctx.b.constant(fill, et(type)), ctx.b.dims(ctx.tensor(0)))};
    };
  };
  register_graph_lowering("aten::zeros_like", like(0), {"aten::empty_like"});
  register_graph_lowering("aten::ones_like", like(1));
  // new_full(self, size, fill_value, *, dtype, ...), new_zeros/new_ones/new_empty(self, size, *, dtype, ...)
  register_graph_lowering("aten::new_full", [](LoweringContext& ctx) {
    c10::ScalarType type = factory_dtype(ctx, 3, ctx.dtype(0));
    return std::vector<Value>{ctx.b.splat(ctx.scalar(2, et(type)), ctx.int_list(1))};
  });
  auto new_like = [](double fill) {
    return [fill](LoweringContext& ctx) {
      c10::ScalarType type = factory_dtype(ctx, 2, ctx.dtype(0));
      return std::vector<Value>{ctx.b.splat(ctx.b.constant(fill, et(type)), ctx.int_list(1))};
    };
  };
  register_graph_lowering("aten::new_zeros", new_like(0), {"aten::new_empty"});
  register_graph_lowering("aten::new_ones", new_like(1));

  // arange.start_step(start, end, step, *, dtype, ...): eager's arange with
  // the dtype torch infers (integers stay int64, else the default float).
  register_graph_lowering("aten::arange.start_step", [](LoweringContext& ctx) {
    bool integral = true;
    for (size_t i = 0; i < 3; ++i) {
      const c10::IValue& v = ctx.ivalue(i);
      if (v.isDouble() || (v.isScalar() && !v.toScalar().isIntegral(false))) integral = false;
    }
    c10::ScalarType type = factory_dtype(
        ctx, 3, integral ? c10::kLong : c10::typeMetaToScalarType(c10::get_default_dtype()));
    ctx.set_out_dtypes({type});
    auto out = delegate(ctx, "aten::arange.start_out", {ctx.arg(0), ctx.arg(1), ctx.arg(2)});
    return std::vector<Value>{convert(ctx.b, out[0], type)};
  }, {}, false, {0, 1, 2});

  // constant_pad_nd(self, pad, value): pairs from the last dim backwards;
  // negative amounts crop, as StableHLO's pad does.
  register_graph_lowering("aten::constant_pad_nd", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    auto pad = ctx.int_list(1);
    int64_t rank = b.type(x).rank();
    TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
    TORCH_CHECK(static_cast<int64_t>(pad.size()) / 2 <= rank, "Length of pad should be no more than "
                "twice the number of dimensions of the input. Pad length is ", pad.size(),
                " while the input has ", rank, " dimensions.");
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    for (size_t i = 0; i < pad.size() / 2; ++i) {
      int64_t d = rank - 1 - static_cast<int64_t>(i);
      low[d] = pad[2 * i];
      high[d] = pad[2 * i + 1];
      TORCH_CHECK(b.dims(x)[d] + low[d] + high[d] >= 0, "The input size ", b.dims(x)[d],
                  ", plus negative padding ", low[d], " and ", high[d],
                  " resulted in a negative output size, which is invalid. Check dimension ", d,
                  " of your input.");
    }
    Value fill = ctx.scalar(2, b.element_type(x));
    return std::vector<Value>{b.pad(x, fill, low, high, interior)};
  });

  register_graph_lowering("aten::split.Tensor", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    int64_t dim = wrap_dim(ctx.int_arg(2), rank);
    int64_t size = ctx.b.dims(x)[dim], chunk = ctx.int_arg(1);
    TORCH_CHECK(chunk >= 0, "split expects split_size be non-negative, but got split_size=", chunk);
    std::vector<Value> out;
    if (chunk == 0) return std::vector<Value>{x};
    for (int64_t s = 0; s < size || (size == 0 && out.empty()); s += chunk) {
      out.push_back(slice_value(ctx.b, x, dim, s, std::min(size, s + chunk), 1));
      if (size == 0) break;
    }
    return out;
  }, {"aten::split_copy.Tensor"});

  register_graph_lowering("aten::split_with_sizes", [](LoweringContext& ctx) {
    Value x = ctx.tensor(0);
    int64_t rank = ctx.b.type(x).rank();
    int64_t dim = wrap_dim(ctx.int_arg(2), rank);
    auto sizes = ctx.int_list(1);
    int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    TORCH_CHECK(total == ctx.b.dims(x)[dim], "split_with_sizes expects split_sizes to sum exactly to ",
                ctx.b.dims(x)[dim], " (input tensor's size at dimension ", dim, "), but got split_sizes=",
                c10::IntArrayRef(sizes));
    std::vector<Value> out;
    int64_t start = 0;
    for (int64_t s : sizes) {
      out.push_back(slice_value(ctx.b, x, dim, start, start + s, 1));
      start += s;
    }
    return out;
  }, {"aten::split_with_sizes_copy"});

  register_graph_lowering("aten::unbind.int", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value x = ctx.tensor(0);
    int64_t rank = b.type(x).rank();
    int64_t dim = wrap_dim(ctx.int_arg(1), rank);
    auto out_dims = b.dims(x);
    int64_t size = out_dims[dim];
    out_dims.erase(out_dims.begin() + dim);
    std::vector<Value> out;
    for (int64_t i = 0; i < size; ++i) {
      out.push_back(b.reshape(slice_value(b, x, dim, i, i + 1, 1), out_dims));
    }
    return out;
  }, {"aten::unbind_copy.int"});

  // slice_scatter(self, src, dim, start, end, step)
  register_graph_lowering("aten::slice_scatter", [](LoweringContext& ctx) {
    Value self = ctx.tensor(0);
    SliceSpec s = slice_spec(ctx, self, 2);
    return std::vector<Value>{slice_scatter(ctx, self, ctx.tensor(1), s.dim, s.start, s.end, s.step)};
  });

  // select_scatter(self, src, dim, index)
  register_graph_lowering("aten::select_scatter", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value self = ctx.tensor(0);
    auto [dim, index] = select_position(ctx, self, 2, "select_scatter");
    auto src_dims = b.dims(self);
    src_dims[dim] = 1;
    Value src = b.reshape(ctx.tensor(1), src_dims);
    return std::vector<Value>{slice_scatter(ctx, self, src, dim, index, index + 1, 1)};
  });

  // embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
  // index_select on the flattened indices, with its range checks.
  register_graph_lowering("aten::embedding", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    Value weight = ctx.tensor(0), indices = ctx.tensor(1);
    TORCH_CHECK(b.type(weight).rank() == 2, "'weight' must be 2-D");
    auto out_dims = b.dims(indices);
    out_dims.push_back(b.dims(weight)[1]);
    Value flat = b.reshape(indices, {b.type(indices).numel()});
    auto r = delegate(ctx, "aten::index_select",
                      {tensor_arg(weight, ctx.dtype(0)), static_arg(int64_t{0}),
                       tensor_arg(flat, ctx.dtype(1))});
    return std::vector<Value>{b.reshape(r[0], out_dims)};
  });

  // Batch norm's functional forms are native_batch_norm with the running
  // statistics returned rather than written.
  register_graph_lowering("aten::_native_batch_norm_legit_functional", [](LoweringContext& ctx) {
    std::vector<LoweringArg> args;
    for (size_t i = 0; i < ctx.num_args(); ++i) args.push_back(ctx.arg(i));
    return delegate(ctx, "aten::native_batch_norm", args);
  });
  // _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
  // in graphs torch's meta gives the statistics used, as the decomposition
  // returns them: the running mean and 1 / sqrt(running_var + eps).
  register_graph_lowering("aten::_native_batch_norm_legit_no_training", [](LoweringContext& ctx) {
    Builder& b = ctx.b;
    std::vector<LoweringArg> args = {ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3), ctx.arg(4),
                                     static_arg(false), ctx.arg(5), ctx.arg(6)};
    auto out = delegate(ctx, "aten::native_batch_norm", args);
    ElementType acc = et(opmath_type(ctx.dtype(0)));
    Value var = b.convert(ctx.tensor(4), acc);
    Value eps = b.splat(ctx.scalar(6, acc), b.dims(var));
    return std::vector<Value>{out[0], b.convert(ctx.tensor(3), acc),
                              b.unary("rsqrt", b.binary("add", var, eps))};
  });
});

}  // namespace
}  // namespace torch_pjrt::ops
