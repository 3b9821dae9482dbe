// The lowering table: one function per aten op that expresses it in
// StableHLO. Eager mode runs each op through its lowering alone; compiled
// graphs (torch.compile) call the same functions node by node. A lowering
// sees its op's schema arguments by position:
//   - tensors as builder Values in their torch dtype and shape,
//   - Scalar and float arguments as 0-d Values (runtime parameters, so a
//     changing learning rate never recompiles),
//   - everything else (ints, bools, lists, dtypes) as static IValues.
// It returns one Value per tensor output of the functional op.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hlo/builder.h"

namespace torch_pjrt::ops {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;
using pjrt::ElementType;

// What a lowering knows about one schema argument.
struct LoweringArg {
  enum class Kind { kTensor, kTensorList, kScalar, kStatic, kNone };
  Kind kind = Kind::kNone;
  Value tensor;                    // kTensor, kScalar
  std::vector<Value> tensors;      // kTensorList; invalid Values for None entries
  c10::ScalarType dtype{};         // kTensor, kScalar: the torch dtype
  std::vector<c10::ScalarType> dtypes;  // kTensorList
  std::vector<bool> present;       // kTensorList of optional tensors: false for None
  bool wrapped_number = false;     // kScalar and 0-d CPU tensors: a Python number
  c10::IValue value;               // kStatic; kScalar: the value, when the program
                                   // is specialised to it (Lowering::special_scalar)
  // kTensor passed without data (Lowering::shape_only); `tensor` is zeros.
  bool placeholder = false;
  std::vector<int64_t> placeholder_dims;
};

class LoweringContext {
 public:
  LoweringContext(Builder& b, std::string op, std::vector<LoweringArg> args)
      : b(b), op_(std::move(op)), args_(std::move(args)) {}

  Builder& b;
  const std::string& op() const { return op_; }
  size_t num_args() const { return args_.size(); }
  const LoweringArg& arg(size_t i) const;
  bool is_none(size_t i) const { return i >= args_.size() || args_[i].kind == LoweringArg::Kind::kNone; }

  Value tensor(size_t i) const;
  c10::ScalarType dtype(size_t i) const;
  std::vector<Value> tensor_list(size_t i) const;
  // A Scalar/float argument (or a 0-d tensor) converted to `type`.
  Value scalar(size_t i, ElementType type) const;
  int64_t int_arg(size_t i) const;
  std::optional<int64_t> optional_int(size_t i) const;
  double double_arg(size_t i) const;
  bool bool_arg(size_t i) const;
  std::vector<int64_t> int_list(size_t i) const;
  std::optional<std::vector<int64_t>> optional_int_list(size_t i) const;
  std::optional<c10::ScalarType> optional_dtype(size_t i) const;
  const c10::IValue& ivalue(size_t i) const;
  // The dtypes of the tensors an in-place or out= call writes (empty for a
  // functional call). Factories like arange follow them, as torch does.
  const std::vector<c10::ScalarType>& out_dtypes() const { return out_dtypes_; }
  // Registers a condition only the data can decide (indices in range):
  // `ok` is an i1 scalar; when it is false, `message` is raised as an
  // IndexError at the next point where the host waits for the device (or at
  // once in debug mode), the way CUDA reports device-side asserts.
  // `index_error`: raise IndexError (as CPU does for index_select), else
  // RuntimeError (as CPU does for gather and scatter).
  void require(Value ok, std::string message, bool index_error = true) {
    checks_.push_back(ok);
    check_messages_.push_back((index_error ? "I" : "R") + std::move(message));
  }
  const std::vector<Value>& checks() const { return checks_; }
  // Random bits of `type` (ui32 or ui64) from the call's generator state;
  // successive calls within one lowering give independent bits.
  Value random_bits(const TensorType& type);
  void set_rng_state(Value state) { rng_state_ = state; }
  Value rng_state() const { return rng_state_; }
  // Each message starts with its error kind: 'I' IndexError, 'R' RuntimeError.
  const std::vector<std::string>& check_messages() const { return check_messages_; }
  void set_out_dtypes(std::vector<c10::ScalarType> dtypes) { out_dtypes_ = std::move(dtypes); }
  // True where the results are checked against torch's meta functions (a
  // compiled graph): an op whose auxiliary outputs differ between CPU and
  // the meta function (embedding_bag's offset2bag, log_sigmoid's buffer)
  // returns them shaped as the meta function says. Eager ops follow CPU.
  void set_meta_layout(bool on) { meta_layout_ = on; }
  bool meta_layout() const { return meta_layout_; }

 private:
  std::string op_;
  std::vector<LoweringArg> args_;
  std::vector<c10::ScalarType> out_dtypes_;
  std::vector<Value> checks_;
  Value rng_state_;
  std::vector<std::string> check_messages_;
  bool meta_layout_ = false;
};

using LoweringFn = std::function<std::vector<Value>(LoweringContext&)>;

struct Lowering {
  std::string op;  // "aten::add.Tensor"
  LoweringFn fn;
  // Scalar arguments whose value decides the program's structure (e.g. the
  // length of arange) are listed here and become static.
  std::vector<int> static_scalars;
  // Tensor arguments of which only the dtype and shape are used (fill_'s
  // self): the lowering gets a placeholder, and no data is passed.
  std::vector<int> shape_only;
  // Draws random numbers: the kernel passes the generator's (seed, offset)
  // as a runtime parameter and advances the offset (LoweringContext::random_bits).
  bool random = false;
  // Tensor arguments the op updates in place although its schema does not
  // say so (native_batch_norm's running statistics). The lowering returns
  // their new values after its outputs, for the defined ones, in order.
  std::vector<int> mutated_args;
  // A Scalar argument (its position) whose value the lowering has a cheaper
  // program for when `is_special(value)` holds: pow's exponent 2 is x*x, as
  // torch's own CPU kernel computes it, where a runtime exponent makes XLA
  // call powf per element. A special value reaches the lowering as
  // LoweringArg::value and keys the program; other values stay runtime
  // parameters, so a changing exponent still never recompiles.
  struct SpecialScalar {
    int arg = -1;
    bool (*is_special)(const c10::Scalar&) = nullptr;
  };
  std::optional<SpecialScalar> special_scalar;
  // Used by compiled graphs only: eager mode implements the op otherwise
  // (views are storage metadata there), so no eager kernel is registered.
  bool graph_only = false;
};

// Registers `fn` for the functional op `op` and for its in-place and out=
// variants `aliases` ("aten::add_.Tensor", "aten::add.out").
void register_lowering(const std::string& op, LoweringFn fn,
                       std::vector<std::string> aliases = {}, std::vector<int> static_scalars = {},
                       std::vector<int> shape_only = {}, bool random = false,
                       std::vector<int> mutated_args = {});

// Gives the lowering of `op` (and its variants) a special scalar argument
// (Lowering::special_scalar).
void specialize_scalar(const std::string& op, int arg, bool (*is_special)(const c10::Scalar&));

// Registers a lowering that only compiled graphs use (see Lowering::graph_only).
void register_graph_lowering(const std::string& op, LoweringFn fn,
                             std::vector<std::string> aliases = {}, bool random = false,
                             std::vector<int> static_scalars = {});

// Runs the lowering of `op` from inside another lowering, with `args` laid
// out as `op`'s schema; its data checks and random state carry over to `ctx`.
std::vector<Value> delegate(LoweringContext& ctx, const std::string& op,
                            std::vector<LoweringArg> args);
LoweringArg tensor_arg(Value v, c10::ScalarType dtype);
LoweringArg static_arg(c10::IValue v);

// The lowering for `op` or one of its variants; null when none is registered.
const Lowering* find_lowering(const std::string& op);
// Every operator name eager mode registers a kernel for, variants included.
std::vector<std::string> lowered_ops();
// Every operator name a compiled graph can lower (eager ones and graph-only).
std::vector<std::string> graph_lowered_ops();

// Static registration from each op family's file.
struct LoweringRegistrar {
  explicit LoweringRegistrar(const std::function<void()>& fn) { fn(); }
};

}  // namespace torch_pjrt::ops
