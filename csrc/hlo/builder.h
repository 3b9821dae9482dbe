// Builds one StableHLO function (@main) op by op, checking operand types as
// it goes, and prints it as MLIR text the PJRT plugins accept. Lowerings use
// this; nothing here knows about torch.
//
// Values are handles into the builder. Ops that take a computation (reduce,
// scatter, sort) build it with a nested Builder passed to a callback.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hlo/types.h"
#include "pjrt/hash.h"

namespace torch_pjrt::hlo {

// A lowering asked for something StableHLO cannot express (mismatched
// operand types, a dimension out of range). Always a bug in a lowering or an
// input the lowering should have rejected first.
class BuildError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct Value {
  int id = -1;
  bool valid() const { return id >= 0; }
};

enum class Compare { kEq, kNe, kLt, kLe, kGt, kGe };

class Builder;

// A function written elsewhere (a JAX kernel's or a user's StableHLO), printed
// into the module once and called by name. `text` holds one or more
// "func.func private" definitions, every symbol already unique to this
// kernel and shapes (so equal symbols mean equal text); `symbol` is the one
// called.
struct ExternalFunction {
  std::string symbol;
  std::string text;
  std::vector<TensorType> parameters;
  std::vector<TensorType> results;
};

// Builds a region body from its block arguments; returns what it yields.
using RegionFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& args)>;

class Builder {
 public:
  explicit Builder(std::string module_name = "program");
  ~Builder();
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  // --- function interface ---------------------------------------------------
  // A parameter of @main; `donate` lets the plugin reuse its buffer for an
  // output (the caller gives the input up).
  Value parameter(const TensorType& type, bool donate = false);
  void set_outputs(const std::vector<Value>& outputs);
  const TensorType& type(Value v) const;
  ElementType element_type(Value v) const { return type(v).type; }
  const std::vector<int64_t>& dims(Value v) const { return type(v).dims; }
  int64_t num_parameters() const;

  // --- constants and shapes -------------------------------------------------
  Value constant(double value, ElementType type);  // a 0-d tensor
  Value constant_int(int64_t value, ElementType type);
  Value constant_bool(bool value);
  // A tensor filled with `value` (a 0-d Value), shaped `dims`.
  Value splat(Value scalar, const std::vector<int64_t>& dims);
  Value zeros(const TensorType& type);
  Value iota(const TensorType& type, int64_t dim);
  Value broadcast_in_dim(Value x, const std::vector<int64_t>& dims,
                         const std::vector<int64_t>& mapping);
  Value reshape(Value x, const std::vector<int64_t>& dims);
  Value transpose(Value x, const std::vector<int64_t>& permutation);
  Value slice(Value x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value dynamic_slice(Value x, const std::vector<Value>& starts,
                      const std::vector<int64_t>& sizes);
  Value dynamic_update_slice(Value x, Value update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& xs, int64_t dim);
  Value pad(Value x, Value pad_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value reverse(Value x, const std::vector<int64_t>& dims);

  // --- elementwise ----------------------------------------------------------
  // `op` is the StableHLO name without prefix ("exponential", "add"), or a
  // full name in another dialect the plugins accept ("chlo.erf").
  // Operands must have the same type; compare returns i1.
  Value unary(std::string_view op, Value x);
  Value binary(std::string_view op, Value a, Value b);
  Value compare(Value a, Value b, Compare direction);
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value min, Value x, Value max);
  Value convert(Value x, ElementType to);
  // Complex numbers from their parts (f32 -> c64, f64 -> c128), and back.
  Value complex(Value re, Value im);
  Value real(Value z);
  Value imag(Value z);
  // Reinterprets the bits. A narrower type adds a last dimension (f32[n] ->
  // ui8[n,4]); a wider one consumes it (ui8[n,4] -> f32[n]).
  Value bitcast_convert(Value x, ElementType to);

  // --- linear algebra ---------------------------------------------------------
  // Cholesky factor of each (batched) square matrix; the other triangle of
  // the result is unspecified (mask it).
  Value cholesky(Value a, bool lower);
  // stablehlo.fft over the trailing lengths.size() dims. kind: FFT, IFFT
  // (normalized by 1/n, as XLA defines it), RFFT (real in, the last dim
  // halved to n/2 + 1) or IRFFT (that half spectrum in, real out).
  Value fft(Value x, const std::string& kind, const std::vector<int64_t>& lengths);
  // Solves op(a) x = b (left) or x op(a) = b for triangular `a`.
  Value triangular_solve(Value a, Value b, bool left_side, bool lower, bool unit_diagonal,
                         bool transpose_a);

  // --- structured -----------------------------------------------------------
  Value dot_general(Value a, Value b, const std::vector<int64_t>& batch_a,
                    const std::vector<int64_t>& batch_b, const std::vector<int64_t>& contract_a,
                    const std::vector<int64_t>& contract_b, ElementType result);
  // Reduces `inputs` over `dims` with `body`, which maps (accumulators...,
  // elements...) to new accumulators, all 0-d.
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const std::vector<int64_t>& dims, const RegionFn& body);
  struct GatherDims {
    std::vector<int64_t> offset_dims;
    std::vector<int64_t> collapsed_slice_dims;
    std::vector<int64_t> start_index_map;
    int64_t index_vector_dim = 0;
  };
  Value gather(Value operand, Value indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes, const std::vector<int64_t>& result_dims);
  struct ScatterDims {
    std::vector<int64_t> update_window_dims;
    std::vector<int64_t> inserted_window_dims;
    std::vector<int64_t> scatter_dims_to_operand_dims;
    int64_t index_vector_dim = 0;
  };
  // `combine` maps (current, update) to the new element, both 0-d.
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dims,
                const RegionFn& combine);
  // Sorts `inputs` (same dims) along `dim`; `comparator` gets (a0, b0, a1, b1, ...)
  // and returns an i1 "a before b".
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dim, bool stable,
                          const RegionFn& comparator);

  // stablehlo.while: `cond` maps the loop-carried values to a 0-d i1 (go
  // on?), `body` to their next values, of the same types; returns the
  // values once `cond` says stop. Both regions see only the carried values.
  std::vector<Value> while_loop(const std::vector<Value>& inits, const RegionFn& cond,
                                const RegionFn& body);

  // Reduces windows of `inputs` (same dims) with `body` ((accumulators...,
  // elements...) -> accumulators). `padding` pads with the init values.
  struct WindowAttrs {
    std::vector<int64_t> dimensions;
    std::vector<int64_t> strides;
    std::vector<int64_t> dilations;
    std::vector<std::pair<int64_t, int64_t>> padding;
  };
  std::vector<Value> reduce_window(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                                   const WindowAttrs& window, const RegionFn& body);

  // N-d convolution in the layout `dimension_numbers`, e.g. for 2-D
  // "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]". The result dims are computed
  // by the caller (they follow from the numbers and the window attributes).
  struct ConvAttrs {
    std::vector<int64_t> window_strides;
    std::vector<std::pair<int64_t, int64_t>> padding;
    std::vector<int64_t> lhs_dilation;
    std::vector<int64_t> rhs_dilation;
    int64_t feature_group_count = 1;
    int64_t batch_group_count = 1;
    std::string dimension_numbers;
  };
  Value convolution(Value lhs, Value rhs, const ConvAttrs& attrs,
                    const std::vector<int64_t>& result_dims, ElementType result_type);

  // Calls `fn` (func.call) on `args`, whose types must be its parameters';
  // its definition is printed after @main, once per symbol. Top level only.
  std::vector<Value> call(std::shared_ptr<const ExternalFunction> fn,
                          const std::vector<Value>& args);

  // --- collectives (collective_ops.cc) --------------------------------------
  // Ops that run across the replicas of a multi-device program. `groups`
  // partitions replica ids into groups of equal size; each op combines
  // values within a group only.
  using ReplicaGroups = std::vector<std::vector<int64_t>>;
  // Combines each of `xs` across the group with `combine` ((a, b) -> a op b,
  // 0-d); one op for all of them, as XLA fuses a coalesced all-reduce.
  std::vector<Value> all_reduce(const std::vector<Value>& xs, const ReplicaGroups& groups,
                                const RegionFn& combine);
  // Concatenates the group's `x` along `dim`, in replica order.
  Value all_gather(Value x, int64_t dim, const ReplicaGroups& groups);
  // Combines like all_reduce, then keeps this replica's slice of `dim`.
  Value reduce_scatter(Value x, int64_t dim, const ReplicaGroups& groups,
                       const RegionFn& combine);
  // Splits `split_dim` into one block per replica of the group, sends block
  // i to replica i, and concatenates what arrives along `concat_dim`.
  Value all_to_all(Value x, int64_t split_dim, int64_t concat_dim, const ReplicaGroups& groups);
  // Sends x from each pair's source replica to its target; a replica that
  // receives nothing gets zeros.
  Value collective_permute(Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // This replica's index, ui32[].
  Value replica_id();

  // Random bits from a counter-based generator: `state` is ui64[2] (key and
  // counter); returns {new_state, bits of `type`}.
  std::vector<Value> rng_bit_generator(Value state, const TensorType& bits_type);

  // --- output ---------------------------------------------------------------
  std::vector<TensorType> output_types() const;
  const std::vector<bool>& donated() const { return donated_; }
  std::string to_mlir() const;
  // Equal for programs that print the same, computed without printing.
  pjrt::Hash128 structural_hash() const;

 private:
  struct Node;
  struct Region;
  Builder(std::string prefix, std::shared_ptr<int> region_counter);
  Value add_node(std::string op, std::vector<Value> operands, std::string attributes,
                 std::vector<TensorType> results, std::vector<std::unique_ptr<Builder>> regions = {});
  std::vector<Value> add_multi(std::string op, std::vector<Value> operands, std::string attributes,
                               std::vector<TensorType> results,
                               std::vector<std::unique_ptr<Builder>> regions);
  std::unique_ptr<Builder> region(const std::vector<TensorType>& arg_types, const RegionFn& fn);
  void check_owned(Value v) const;
  void print_body(std::string& out, int indent) const;
  std::string value_name(Value v) const;
  void hash_into(pjrt::Hasher& h) const;

  std::string module_name_;
  std::string prefix_;
  bool nested_;
  std::shared_ptr<int> region_counter_;  // shared by a builder and its regions
  std::vector<std::unique_ptr<Node>> nodes_;
  // value id -> (node index or -1 for parameters, result index, type). A
  // deque, so the references type() and dims() return stay valid while
  // more ops are added (lowerings hold them across calls).
  struct ValueInfo {
    int node;
    int index;
    TensorType type;
  };
  std::deque<ValueInfo> values_;
  std::vector<bool> donated_;
  std::vector<Value> outputs_;
  std::vector<std::shared_ptr<const ExternalFunction>> externals_;  // distinct symbols
};

// Module text printed by Builder::to_mlir marks each external function's
// definitions with this comment line, followed by the symbol and a newline.
inline constexpr const char* kExternalMarker = "  // external @";

}  // namespace torch_pjrt::hlo
