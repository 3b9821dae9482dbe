// The structured StableHLO ops of Builder: dot_general, reduce, gather,
// scatter, sort, reduce_window, convolution and the random bit generator.
// Kept apart from builder.cc, which holds the core (values, parameters,
// shapes, elementwise ops, printing).
#include <algorithm>
#include <set>
#include <string>

#include "hlo/builder.h"
#include "hlo/builder_util.h"

namespace torch_pjrt::hlo {

using namespace builder_util;

// --- structured ----------------------------------------------------------------

Value Builder::dot_general(Value a, Value b, const std::vector<int64_t>& batch_a,
                           const std::vector<int64_t>& batch_b,
                           const std::vector<int64_t>& contract_a,
                           const std::vector<int64_t>& contract_b, ElementType result) {
  const TensorType& ta = type(a);
  const TensorType& tb = type(b);
  check_dims_in_range("dot_general", batch_a, ta.rank());
  check_dims_in_range("dot_general", contract_a, ta.rank());
  check_dims_in_range("dot_general", batch_b, tb.rank());
  check_dims_in_range("dot_general", contract_b, tb.rank());
  if (batch_a.size() != batch_b.size() || contract_a.size() != contract_b.size()) {
    fail("dot_general", "batch and contracting dimension counts differ");
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < batch_a.size(); ++i) {
    if (ta.dims[batch_a[i]] != tb.dims[batch_b[i]]) fail("dot_general", "batch sizes differ");
    dims.push_back(ta.dims[batch_a[i]]);
  }
  for (size_t i = 0; i < contract_a.size(); ++i) {
    if (ta.dims[contract_a[i]] != tb.dims[contract_b[i]]) {
      fail("dot_general", "contracting sizes differ: " + describe(ta) + " x " + describe(tb));
    }
  }
  auto free_dims = [&](const TensorType& t, const std::vector<int64_t>& batch,
                       const std::vector<int64_t>& contract) {
    for (int64_t i = 0; i < t.rank(); ++i) {
      if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
          std::find(contract.begin(), contract.end(), i) == contract.end()) {
        dims.push_back(t.dims[i]);
      }
    }
  };
  free_dims(ta, batch_a, contract_a);
  free_dims(tb, batch_b, contract_b);
  return add_node("dot_general", {a, b},
                  "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " +
                      dims_list(batch_a) + ", rhs_batching_dimensions = " + dims_list(batch_b) +
                      ", lhs_contracting_dimensions = " + dims_list(contract_a) +
                      ", rhs_contracting_dimensions = " + dims_list(contract_b) + ">",
                  {TensorType{result, dims}});
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits,
                                   const std::vector<int64_t>& dims, const RegionFn& body) {
  if (inputs.empty() || inputs.size() != inits.size()) {
    fail("reduce", "needs as many initial values as inputs");
  }
  const TensorType& first = type(inputs[0]);
  check_dims_in_range("reduce", dims, first.rank());
  std::vector<TensorType> results, arg_types;
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < first.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(first.dims[i]);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (type(inputs[i]).dims != first.dims) fail("reduce", "inputs have different shapes");
    results.push_back(TensorType{type(inputs[i]).type, kept});
    arg_types.push_back(TensorType{type(inputs[i]).type, {}});
  }
  std::vector<TensorType> block = arg_types;
  block.insert(block.end(), arg_types.begin(), arg_types.end());
  std::vector<std::unique_ptr<Builder>> regions;
  regions.push_back(region(block, body));
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return add_multi("reduce", operands, "dimensions = " + i64_array(dims), results,
                   std::move(regions));
}

Value Builder::gather(Value operand, Value indices, const GatherDims& d,
                      const std::vector<int64_t>& slice_sizes,
                      const std::vector<int64_t>& result_dims) {
  return add_node("gather", {operand, indices},
                  "dimension_numbers = #stablehlo.gather<offset_dims = " +
                      dims_list(d.offset_dims) + ", collapsed_slice_dims = " +
                      dims_list(d.collapsed_slice_dims) + ", start_index_map = " +
                      dims_list(d.start_index_map) + ", index_vector_dim = " +
                      std::to_string(d.index_vector_dim) + ">, slice_sizes = " +
                      i64_array(slice_sizes) + ", indices_are_sorted = false",
                  {TensorType{type(operand).type, result_dims}});
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& d,
                       const RegionFn& combine) {
  TensorType scalar{type(operand).type, {}};
  std::vector<std::unique_ptr<Builder>> regions;
  regions.push_back(region({scalar, scalar}, combine));
  return add_node("scatter", {operand, indices, updates},
                  "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                      dims_list(d.update_window_dims) + ", inserted_window_dims = " +
                      dims_list(d.inserted_window_dims) + ", scatter_dims_to_operand_dims = " +
                      dims_list(d.scatter_dims_to_operand_dims) + ", index_vector_dim = " +
                      std::to_string(d.index_vector_dim) +
                      ">, indices_are_sorted = false, unique_indices = false",
                  {type(operand)}, std::move(regions));
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dim, bool stable,
                                 const RegionFn& comparator) {
  if (inputs.empty()) fail("sort", "needs an input");
  check_dims_in_range("sort", {dim}, type(inputs[0]).rank());
  std::vector<TensorType> results, block;
  for (Value v : inputs) {
    if (type(v).dims != type(inputs[0]).dims) fail("sort", "inputs have different shapes");
    results.push_back(type(v));
    block.push_back(TensorType{type(v).type, {}});
    block.push_back(TensorType{type(v).type, {}});
  }
  std::vector<std::unique_ptr<Builder>> regions;
  regions.push_back(region(block, comparator));
  return add_multi("sort", inputs,
                   "dimension = " + std::to_string(dim) + " : i64, is_stable = " +
                       (stable ? "true" : "false"),
                   results, std::move(regions));
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& inits, const RegionFn& cond,
                                      const RegionFn& body) {
  if (inits.empty()) fail("while", "needs a loop-carried value");
  std::vector<TensorType> types;
  for (Value v : inits) types.push_back(type(v));
  std::vector<std::unique_ptr<Builder>> regions;
  regions.push_back(region(types, cond));
  regions.push_back(region(types, body));
  std::vector<TensorType> go = regions[0]->output_types();
  if (go.size() != 1 || go[0].type != ElementType::kPred || !go[0].dims.empty()) {
    fail("while", "the condition must give one 0-d i1");
  }
  std::vector<TensorType> next = regions[1]->output_types();
  if (next.size() != types.size()) fail("while", "the body must give every carried value");
  for (size_t i = 0; i < types.size(); ++i) {
    if (next[i].type != types[i].type || next[i].dims != types[i].dims) {
      fail("while", "the body changes the type of carried value " + std::to_string(i));
    }
  }
  return add_multi("while", inits, "", types, std::move(regions));
}

std::vector<Value> Builder::reduce_window(const std::vector<Value>& inputs,
                                          const std::vector<Value>& inits, const WindowAttrs& w,
                                          const RegionFn& body) {
  if (inputs.empty() || inputs.size() != inits.size()) {
    fail("reduce_window", "needs as many initial values as inputs");
  }
  const std::vector<int64_t> in = type(inputs[0]).dims;
  size_t rank = in.size();
  if (w.dimensions.size() != rank || w.strides.size() != rank || w.dilations.size() != rank ||
      w.padding.size() != rank) {
    fail("reduce_window", "window attributes need one entry per dimension");
  }
  std::vector<int64_t> out;
  std::string padding = "dense<[";
  for (size_t i = 0; i < rank; ++i) {
    int64_t padded = in[i] + w.padding[i].first + w.padding[i].second;
    int64_t span = (w.dimensions[i] - 1) * w.dilations[i] + 1;
    if (padded < span) fail("reduce_window", "window larger than the padded input");
    out.push_back((padded - span) / w.strides[i] + 1);
    padding += (i ? ", [" : "[") + std::to_string(w.padding[i].first) + ", " +
               std::to_string(w.padding[i].second) + "]";
  }
  padding += "]> : tensor<" + std::to_string(rank) + "x2xi64>";
  std::vector<TensorType> results, scalars;
  for (Value v : inputs) {
    results.push_back(TensorType{type(v).type, out});
    scalars.push_back(TensorType{type(v).type, {}});
  }
  std::vector<TensorType> block = scalars;
  block.insert(block.end(), scalars.begin(), scalars.end());
  std::vector<std::unique_ptr<Builder>> regions;
  regions.push_back(region(block, body));
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return add_multi("reduce_window", operands,
                   "padding = " + padding + ", window_dilations = " + i64_array(w.dilations) +
                       ", window_dimensions = " + i64_array(w.dimensions) +
                       ", window_strides = " + i64_array(w.strides),
                   results, std::move(regions));
}

Value Builder::convolution(Value lhs, Value rhs, const ConvAttrs& a,
                           const std::vector<int64_t>& result_dims, ElementType result_type) {
  std::string padding = "dense<[";
  for (size_t i = 0; i < a.padding.size(); ++i) {
    padding += (i ? ", [" : "[") + std::to_string(a.padding[i].first) + ", " +
               std::to_string(a.padding[i].second) + "]";
  }
  padding += "]> : tensor<" + std::to_string(a.padding.size()) + "x2xi64>";
  if (a.padding.empty()) padding = "dense<0> : tensor<0x2xi64>";
  return add_node("convolution", {lhs, rhs},
                  "batch_group_count = " + std::to_string(a.batch_group_count) +
                      " : i64, dimension_numbers = #stablehlo.conv<" + a.dimension_numbers +
                      ">, feature_group_count = " + std::to_string(a.feature_group_count) +
                      " : i64, lhs_dilation = " + i64_array(a.lhs_dilation) + ", padding = " +
                      padding + ", rhs_dilation = " + i64_array(a.rhs_dilation) +
                      ", window_strides = " + i64_array(a.window_strides),
                  {TensorType{result_type, result_dims}});
}

std::vector<Value> Builder::rng_bit_generator(Value state, const TensorType& bits_type) {
  TensorType state_type = type(state);
  if (state_type != TensorType{ElementType::kU64, {2}}) {
    fail("rng_bit_generator", "the state must be ui64[2], got " + describe(state_type));
  }
  return add_multi("rng_bit_generator", {state},
                   "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>", {state_type, bits_type},
                   {});
}

// --- fft -----------------------------------------------------------------------

Value Builder::fft(Value x, const std::string& kind, const std::vector<int64_t>& lengths) {
  const TensorType& in = type(x);
  int64_t k = static_cast<int64_t>(lengths.size());
  if (k < 1 || k > 3 || k > in.rank()) fail("fft", "needs 1 to 3 trailing dims, got " + describe(in));
  for (int64_t n : lengths) {
    if (n < 1) fail("fft", "lengths must be positive");
  }
  TensorType out = in;
  bool real_in = kind == "RFFT";
  if (real_in ? !(in.type == ElementType::kF32 || in.type == ElementType::kF64) : !is_complex(in.type)) {
    fail("fft", kind + " does not take " + describe(in));
  }
  int64_t last = in.rank() - 1;
  for (int64_t i = 0; i < k; ++i) {
    int64_t want = lengths[i];
    if (kind == "IRFFT" && i == k - 1) want = lengths[i] / 2 + 1;
    if (in.dims[in.rank() - k + i] != want) {
      fail("fft", kind + " lengths do not fit " + describe(in));
    }
  }
  if (kind == "RFFT") {
    out.type = in.type == ElementType::kF32 ? ElementType::kC64 : ElementType::kC128;
    out.dims[last] = lengths.back() / 2 + 1;
  } else if (kind == "IRFFT") {
    out.type = complex_part(in.type);
    out.dims[last] = lengths.back();
  } else if (kind != "FFT" && kind != "IFFT") {
    fail("fft", "unknown kind " + kind);
  }
  return add_node("stablehlo.fft", {x},
                  "fft_type = #stablehlo<fft_type " + kind + ">, fft_length = " + i64_array(lengths), {out});
}

}  // namespace torch_pjrt::hlo
