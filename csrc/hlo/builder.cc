#include "hlo/builder.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "hlo/builder_util.h"

namespace torch_pjrt::hlo {

using namespace builder_util;

struct Builder::Node {
  std::string op;  // full name, e.g. "stablehlo.add"
  std::vector<Value> operands;
  std::string attributes;  // generic-form attribute dictionary contents
  std::vector<Value> results;
  std::vector<std::unique_ptr<Builder>> regions;
};

namespace {

const char* direction_name(Compare c) {
  switch (c) {
    case Compare::kEq: return "EQ";
    case Compare::kNe: return "NE";
    case Compare::kLt: return "LT";
    case Compare::kLe: return "LE";
    case Compare::kGt: return "GT";
    case Compare::kGe: return "GE";
  }
  return "EQ";
}

// Floats print as the hex of their f64 bits, so NaN, infinities and every
// value round-trip exactly; the program converts to the target type.
std::string f64_literal(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%016llX", static_cast<unsigned long long>(bits));
  return buffer;
}

}  // namespace

Builder::Builder(std::string module_name)
    : module_name_(std::move(module_name)),
      prefix_("v"),
      nested_(false),
      region_counter_(std::make_shared<int>(0)) {}

Builder::Builder(std::string prefix, std::shared_ptr<int> region_counter)
    : prefix_(std::move(prefix)), nested_(true), region_counter_(std::move(region_counter)) {}

Builder::~Builder() = default;

void Builder::check_owned(Value v) const {
  if (!v.valid() || v.id >= static_cast<int>(values_.size())) {
    throw BuildError("hlo::Builder: a Value from another builder or an invalid Value was used");
  }
}

const TensorType& Builder::type(Value v) const {
  check_owned(v);
  return values_[v.id].type;
}

int64_t Builder::num_parameters() const {
  return std::count_if(values_.begin(), values_.end(),
                       [](const ValueInfo& v) { return v.node < 0; });
}

Value Builder::parameter(const TensorType& type, bool donate) {
  if (!nodes_.empty() && !nested_) {
    throw BuildError("hlo::Builder: parameters must be declared before the first op");
  }
  values_.push_back({-1, static_cast<int>(donated_.size()), type});
  donated_.push_back(donate);
  return Value{static_cast<int>(values_.size()) - 1};
}

std::vector<TensorType> Builder::output_types() const {
  std::vector<TensorType> out;
  for (Value v : outputs_) out.push_back(type(v));
  return out;
}

void Builder::set_outputs(const std::vector<Value>& outputs) {
  for (Value v : outputs) check_owned(v);
  outputs_ = outputs;
}

std::vector<Value> Builder::add_multi(std::string op, std::vector<Value> operands,
                                      std::string attributes, std::vector<TensorType> results,
                                      std::vector<std::unique_ptr<Builder>> regions) {
  for (Value v : operands) check_owned(v);
  auto node = std::make_unique<Node>();
  // "chlo.erf" and other dialects come fully named; StableHLO ops without.
  node->op = op.find('.') == std::string::npos ? "stablehlo." + op : op;
  node->operands = std::move(operands);
  node->attributes = std::move(attributes);
  node->regions = std::move(regions);
  int node_index = static_cast<int>(nodes_.size());
  for (size_t i = 0; i < results.size(); ++i) {
    values_.push_back({node_index, static_cast<int>(i), results[i]});
    node->results.push_back(Value{static_cast<int>(values_.size()) - 1});
  }
  std::vector<Value> out = node->results;
  nodes_.push_back(std::move(node));
  return out;
}

Value Builder::add_node(std::string op, std::vector<Value> operands, std::string attributes,
                        std::vector<TensorType> results,
                        std::vector<std::unique_ptr<Builder>> regions) {
  return add_multi(std::move(op), std::move(operands), std::move(attributes), std::move(results),
                   std::move(regions))[0];
}

std::unique_ptr<Builder> Builder::region(const std::vector<TensorType>& arg_types,
                                         const RegionFn& fn) {
  int id = (*region_counter_)++;
  auto body = std::unique_ptr<Builder>(
      new Builder(prefix_ + "r" + std::to_string(id) + "_", region_counter_));
  std::vector<Value> args;
  for (const TensorType& t : arg_types) args.push_back(body->parameter(t));
  body->set_outputs(fn(*body, args));
  return body;
}

// --- constants and shapes ----------------------------------------------------

Value Builder::constant(double value, ElementType type) {
  if (!is_float(type)) {
    if (type == ElementType::kPred) return constant_bool(value != 0);
    if (is_integral(type)) return constant_int(static_cast<int64_t>(value), type);
    // A real number as a complex constant: the number and a zero part.
    ElementType part = complex_part(type);
    return complex(constant(value, part), constant(0.0, part));
  }
  Value c = add_node("constant", {},
                     "value = dense<" + f64_literal(value) + "> : tensor<f64>",
                     {TensorType{ElementType::kF64, {}}});
  return type == ElementType::kF64 ? c : convert(c, type);
}

Value Builder::constant_int(int64_t value, ElementType type) {
  if (type == ElementType::kPred) return constant_bool(value != 0);
  if (!is_integral(type)) return constant(static_cast<double>(value), type);
  TensorType t{type, {}};
  std::string text = std::to_string(value);
  if (is_unsigned_int(type) && value < 0) {
    // A bit pattern (-1: all ones), printed as the unsigned value MLIR expects.
    size_t bits = pjrt::byte_width(type) * 8;
    uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    text = std::to_string(static_cast<uint64_t>(value) & mask);
  }
  return add_node("constant", {}, "value = dense<" + text + "> : " + t.mlir(), {t});
}

Value Builder::constant_bool(bool value) {
  TensorType t{ElementType::kPred, {}};
  return add_node("constant", {}, std::string("value = dense<") + (value ? "true" : "false") +
                                      "> : tensor<i1>",
                  {t});
}

Value Builder::splat(Value scalar, const std::vector<int64_t>& dims) {
  if (!type(scalar).dims.empty()) fail("broadcast_in_dim", "splat needs a 0-d value");
  if (dims.empty()) return scalar;
  return broadcast_in_dim(scalar, dims, {});
}

Value Builder::zeros(const TensorType& t) { return splat(constant(0, t.type), t.dims); }

Value Builder::iota(const TensorType& t, int64_t dim) {
  check_dims_in_range("iota", {dim}, t.rank());
  return add_node("iota", {}, "iota_dimension = " + std::to_string(dim) + " : i64", {t});
}

Value Builder::broadcast_in_dim(Value x, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& mapping) {
  const TensorType& in = type(x);
  if (static_cast<int64_t>(mapping.size()) != in.rank()) {
    fail("broadcast_in_dim", "mapping has " + std::to_string(mapping.size()) + " entries for " +
                                 describe(in));
  }
  check_dims_in_range("broadcast_in_dim", mapping, static_cast<int64_t>(dims.size()));
  for (size_t i = 0; i < mapping.size(); ++i) {
    if (in.dims[i] != 1 && in.dims[i] != dims[mapping[i]]) {
      fail("broadcast_in_dim", "cannot broadcast " + describe(in) + " to " +
                                   TensorType{in.type, dims}.mlir());
    }
  }
  if (dims == in.dims) {
    bool identity = true;
    for (size_t i = 0; i < mapping.size(); ++i) identity &= mapping[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  return add_node("broadcast_in_dim", {x}, "broadcast_dimensions = " + i64_array(mapping),
                  {TensorType{in.type, dims}});
}

Value Builder::reshape(Value x, const std::vector<int64_t>& dims) {
  const TensorType& in = type(x);
  TensorType out{in.type, dims};
  if (out.numel() != in.numel()) {
    fail("reshape", "cannot reshape " + describe(in) + " to " + out.mlir());
  }
  if (out.dims == in.dims) return x;
  return add_node("reshape", {x}, "", {out});
}

Value Builder::transpose(Value x, const std::vector<int64_t>& permutation) {
  const TensorType& in = type(x);
  if (static_cast<int64_t>(permutation.size()) != in.rank()) {
    fail("transpose", "permutation size differs from rank of " + describe(in));
  }
  check_dims_in_range("transpose", permutation, in.rank());
  std::vector<int64_t> dims;
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) {
    dims.push_back(in.dims[permutation[i]]);
    identity &= permutation[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  return add_node("transpose", {x}, "permutation = " + i64_array(permutation),
                  {TensorType{in.type, dims}});
}

Value Builder::slice(Value x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
                     const std::vector<int64_t>& strides) {
  const TensorType& in = type(x);
  int64_t rank = in.rank();
  if (static_cast<int64_t>(start.size()) != rank || static_cast<int64_t>(limit.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank) {
    fail("slice", "start/limit/strides must have one entry per dimension of " + describe(in));
  }
  std::vector<int64_t> dims;
  bool identity = true;
  for (int64_t i = 0; i < rank; ++i) {
    if (start[i] < 0 || limit[i] > in.dims[i] || start[i] > limit[i] || strides[i] < 1) {
      fail("slice", "bad bounds for dimension " + std::to_string(i) + " of " + describe(in));
    }
    dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
    identity &= start[i] == 0 && limit[i] == in.dims[i] && strides[i] == 1;
  }
  if (identity) return x;
  return add_node("slice", {x},
                  "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                      ", strides = " + i64_array(strides),
                  {TensorType{in.type, dims}});
}

Value Builder::dynamic_slice(Value x, const std::vector<Value>& starts,
                             const std::vector<int64_t>& sizes) {
  const TensorType& in = type(x);
  if (static_cast<int64_t>(starts.size()) != in.rank() ||
      static_cast<int64_t>(sizes.size()) != in.rank()) {
    fail("dynamic_slice", "needs one start and size per dimension of " + describe(in));
  }
  std::vector<Value> operands = {x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return add_node("dynamic_slice", operands, "slice_sizes = " + i64_array(sizes),
                  {TensorType{in.type, sizes}});
}

Value Builder::dynamic_update_slice(Value x, Value update, const std::vector<Value>& starts) {
  const TensorType& in = type(x);
  if (type(update).type != in.type || type(update).rank() != in.rank()) {
    fail("dynamic_update_slice", describe(type(update)) + " does not fit " + describe(in));
  }
  std::vector<Value> operands = {x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return add_node("dynamic_update_slice", operands, "", {in});
}

Value Builder::concatenate(const std::vector<Value>& xs, int64_t dim) {
  if (xs.empty()) fail("concatenate", "needs at least one operand");
  TensorType out = type(xs[0]);
  check_dims_in_range("concatenate", {dim}, out.rank());
  out.dims[dim] = 0;
  for (Value v : xs) {
    const TensorType& t = type(v);
    bool fits = t.type == out.type && t.rank() == out.rank();
    for (int64_t i = 0; fits && i < t.rank(); ++i) fits = i == dim || t.dims[i] == out.dims[i];
    if (!fits) fail("concatenate", describe(t) + " does not match " + describe(type(xs[0])));
    out.dims[dim] += t.dims[dim];
  }
  if (xs.size() == 1) return xs[0];
  return add_node("concatenate", xs, "dimension = " + std::to_string(dim) + " : i64", {out});
}

Value Builder::pad(Value x, Value pad_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  const TensorType& in = type(x);
  if (static_cast<int64_t>(low.size()) != in.rank() ||
      static_cast<int64_t>(high.size()) != in.rank() ||
      static_cast<int64_t>(interior.size()) != in.rank()) {
    fail("pad", "needs one padding entry per dimension of " + describe(in));
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < in.rank(); ++i) {
    int64_t d = in.dims[i] == 0 ? 0 : in.dims[i] + (in.dims[i] - 1) * interior[i];
    dims.push_back(d + low[i] + high[i]);
    if (dims.back() < 0) fail("pad", "negative result size");
  }
  return add_node("pad", {x, pad_value},
                  "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " +
                      i64_array(high) + ", interior_padding = " + i64_array(interior),
                  {TensorType{in.type, dims}});
}

Value Builder::reverse(Value x, const std::vector<int64_t>& dims) {
  check_dims_in_range("reverse", dims, type(x).rank());
  if (dims.empty()) return x;
  return add_node("reverse", {x}, "dimensions = " + i64_array(dims), {type(x)});
}

// --- elementwise ---------------------------------------------------------------

Value Builder::unary(std::string_view op, Value x) {
  return add_node(std::string(op), {x}, "", {type(x)});
}

Value Builder::binary(std::string_view op, Value a, Value b) {
  if (type(a) != type(b)) {
    fail(std::string(op), "operand types differ: " + describe(type(a)) + " vs " + describe(type(b)));
  }
  return add_node(std::string(op), {a, b}, "", {type(a)});
}

Value Builder::compare(Value a, Value b, Compare direction) {
  if (type(a) != type(b)) {
    fail("compare", "operand types differ: " + describe(type(a)) + " vs " + describe(type(b)));
  }
  ElementType t = type(a).type;
  const char* kind = is_float(t) || is_complex(t) ? "FLOAT"
                     : is_signed_int(t)          ? "SIGNED"
                                                 : "UNSIGNED";
  return add_node("compare", {a, b},
                  std::string("comparison_direction = #stablehlo<comparison_direction ") +
                      direction_name(direction) + ">, compare_type = #stablehlo<comparison_type " +
                      kind + ">",
                  {TensorType{ElementType::kPred, type(a).dims}});
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  if (type(on_true) != type(on_false)) {
    fail("select", "branch types differ: " + describe(type(on_true)) + " vs " +
                       describe(type(on_false)));
  }
  if (type(pred).type != ElementType::kPred ||
      (type(pred).rank() != 0 && type(pred).dims != type(on_true).dims)) {
    fail("select", "predicate " + describe(type(pred)) + " does not fit " +
                       describe(type(on_true)));
  }
  return add_node("select", {pred, on_true, on_false}, "", {type(on_true)});
}

Value Builder::clamp(Value min, Value x, Value max) {
  return add_node("clamp", {min, x, max}, "", {type(x)});
}

Value Builder::convert(Value x, ElementType to) {
  if (type(x).type == to) return x;
  return add_node("convert", {x}, "", {TensorType{to, type(x).dims}});
}

Value Builder::complex(Value re, Value im) {
  if (type(re) != type(im)) {
    fail("complex", "parts differ: " + describe(type(re)) + " vs " + describe(type(im)));
  }
  ElementType t = type(re).type;
  if (t != ElementType::kF32 && t != ElementType::kF64) {
    fail("complex", "parts must be f32 or f64, got " + describe(type(re)));
  }
  return add_node("complex", {re, im}, "",
                  {TensorType{t == ElementType::kF32 ? ElementType::kC64 : ElementType::kC128,
                              type(re).dims}});
}

Value Builder::real(Value z) {
  if (!is_complex(type(z).type)) fail("real", "needs a complex operand, got " + describe(type(z)));
  return add_node("real", {z}, "", {TensorType{complex_part(type(z).type), type(z).dims}});
}

Value Builder::imag(Value z) {
  if (!is_complex(type(z).type)) fail("imag", "needs a complex operand, got " + describe(type(z)));
  return add_node("imag", {z}, "", {TensorType{complex_part(type(z).type), type(z).dims}});
}

Value Builder::bitcast_convert(Value x, ElementType to) {
  const TensorType& in = type(x);
  if (in.type == to) return x;
  size_t from_width = pjrt::byte_width(in.type), to_width = pjrt::byte_width(to);
  std::vector<int64_t> dims = in.dims;
  if (to_width < from_width) {
    // Each element becomes `ratio` narrower ones along a new last dim.
    dims.push_back(static_cast<int64_t>(from_width / to_width));
  } else if (to_width > from_width) {
    int64_t ratio = static_cast<int64_t>(to_width / from_width);
    if (dims.empty() || dims.back() != ratio) {
      fail("bitcast_convert", "widening " + describe(in) + " to " + std::string(pjrt::mlir_name(to)) +
                                  " needs a last dimension of " + std::to_string(ratio));
    }
    dims.pop_back();
  }
  return add_node("bitcast_convert", {x}, "", {TensorType{to, dims}});
}

// --- linear algebra ------------------------------------------------------------

Value Builder::cholesky(Value a, bool lower) {
  const TensorType& in = type(a);
  if (in.rank() < 2 || in.dims[in.rank() - 1] != in.dims[in.rank() - 2]) {
    fail("cholesky", "needs (batches of) square matrices, got " + describe(in));
  }
  return add_node("cholesky", {a}, std::string("lower = ") + (lower ? "true" : "false"), {in});
}

Value Builder::triangular_solve(Value a, Value b, bool left_side, bool lower, bool unit_diagonal,
                                bool transpose_a) {
  const TensorType& ta = type(a);
  const TensorType& tb = type(b);
  int64_t r = ta.rank();
  if (r < 2 || ta.dims[r - 1] != ta.dims[r - 2] || tb.rank() != r ||
      ta.dims[r - 1] != tb.dims[left_side ? r - 2 : r - 1] ||
      !std::equal(ta.dims.begin(), ta.dims.end() - 2, tb.dims.begin())) {
    fail("triangular_solve", "shapes do not fit: " + describe(ta) + " and " + describe(tb));
  }
  auto flag = [](bool v) { return v ? std::string("true") : std::string("false"); };
  std::string attrs = "left_side = " + flag(left_side) + ", lower = " + flag(lower) +
                      ", unit_diagonal = " + flag(unit_diagonal) + ", transpose_a = #stablehlo<transpose " +
                      (transpose_a ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return add_node("triangular_solve", {a, b}, attrs, {tb});
}

// --- printing ------------------------------------------------------------------

std::string Builder::value_name(Value v) const {
  const ValueInfo& info = values_[v.id];
  if (info.node < 0) return "%" + prefix_ + "arg" + std::to_string(info.index);
  const Node& node = *nodes_[info.node];
  std::string base = "%" + prefix_ + std::to_string(info.node);
  return node.results.size() == 1 ? base : base + "#" + std::to_string(info.index);
}

void Builder::print_body(std::string& out, int indent) const {
  std::string pad(indent, ' ');
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = *nodes_[n];
    out += pad + "%" + prefix_ + std::to_string(n);
    if (node.results.size() > 1) out += ":" + std::to_string(node.results.size());
    out += " = \"" + node.op + "\"(";
    for (size_t i = 0; i < node.operands.size(); ++i) {
      out += (i ? ", " : "") + value_name(node.operands[i]);
    }
    out += ")";
    if (!node.regions.empty()) {
      out += " (";
      for (size_t r = 0; r < node.regions.size(); ++r) {
        const Builder& body = *node.regions[r];
        out += (r ? ", {\n" : "{\n") + pad + "  ^bb0(";
        for (size_t a = 0; a < body.values_.size(); ++a) {
          if (body.values_[a].node >= 0) continue;
          out += (a ? ", " : "") + body.value_name(Value{static_cast<int>(a)}) + ": " +
                 body.values_[a].type.mlir();
        }
        out += "):\n";
        body.print_body(out, indent + 4);
        out += pad + "    \"stablehlo.return\"(";
        std::string types;
        for (size_t i = 0; i < body.outputs_.size(); ++i) {
          out += (i ? ", " : "") + body.value_name(body.outputs_[i]);
          types += (i ? ", " : "") + body.type(body.outputs_[i]).mlir();
        }
        out += ") : (" + types + ") -> ()\n" + pad + "}";
      }
      out += ")";
    }
    if (!node.attributes.empty()) out += " {" + node.attributes + "}";
    out += " : (";
    for (size_t i = 0; i < node.operands.size(); ++i) {
      out += (i ? ", " : "") + type(node.operands[i]).mlir();
    }
    out += ") -> ";
    if (node.results.size() == 1) {
      out += type(node.results[0]).mlir();
    } else {
      out += "(";
      for (size_t i = 0; i < node.results.size(); ++i) {
        out += (i ? ", " : "") + type(node.results[i]).mlir();
      }
      out += ")";
    }
    out += "\n";
  }
}

std::string Builder::to_mlir() const {
  if (nested_) throw BuildError("hlo::Builder: only a top-level builder prints a module");
  std::string out = "module @" + module_name_ + " {\n  func.func public @main(";
  bool first = true;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].node >= 0) continue;
    out += (first ? "" : ", ") + value_name(Value{static_cast<int>(i)}) + ": " +
           values_[i].type.mlir();
    if (donated_[values_[i].index]) out += " {jax.buffer_donor = true}";
    first = false;
  }
  out += ") -> (";
  for (size_t i = 0; i < outputs_.size(); ++i) out += (i ? ", " : "") + type(outputs_[i]).mlir();
  out += ") {\n";
  print_body(out, 4);
  out += "    return ";
  std::string types;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    out += (i ? ", " : "") + value_name(outputs_[i]);
    types += (i ? ", " : "") + type(outputs_[i]).mlir();
  }
  out += " : " + types + "\n  }\n";
  for (const auto& fn : externals_) {
    out += kExternalMarker + fn->symbol + "\n" + fn->text;
    if (!fn->text.empty() && fn->text.back() != '\n') out += "\n";
  }
  out += "}\n";
  return out;
}

std::vector<Value> Builder::call(std::shared_ptr<const ExternalFunction> fn,
                                 const std::vector<Value>& args) {
  if (nested_) throw BuildError("hlo::Builder: an external function is called from a region");
  if (!fn || fn->symbol.empty()) throw BuildError("hlo::Builder: call of an unnamed function");
  if (args.size() != fn->parameters.size()) {
    throw BuildError("hlo::Builder: @" + fn->symbol + " takes " +
                     std::to_string(fn->parameters.size()) + " arguments, got " +
                     std::to_string(args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    check_owned(args[i]);
    if (type(args[i]) != fn->parameters[i]) {
      throw BuildError("hlo::Builder: argument " + std::to_string(i) + " of @" + fn->symbol +
                       " is " + type(args[i]).mlir() + ", expected " + fn->parameters[i].mlir());
    }
  }
  bool known = false;
  for (const auto& e : externals_) known = known || e->symbol == fn->symbol;
  if (!known) externals_.push_back(fn);
  if (fn->results.empty()) {
    throw BuildError("hlo::Builder: @" + fn->symbol + " returns nothing");
  }
  return add_multi("func.call", args, "callee = @" + fn->symbol, fn->results, {});
}

void Builder::hash_into(pjrt::Hasher& h) const {
  for (const ValueInfo& v : values_) {
    h.add(static_cast<uint64_t>(v.node + 1)).add(static_cast<uint64_t>(v.index));
    h.add(static_cast<uint64_t>(v.type.type)).add(static_cast<uint64_t>(v.type.dims.size()));
    for (int64_t d : v.type.dims) h.add(static_cast<uint64_t>(d));
  }
  for (bool d : donated_) h.add(uint64_t{d});
  for (const auto& node : nodes_) {
    h.add(node->op).add(node->attributes).add(static_cast<uint64_t>(node->operands.size()));
    for (Value v : node->operands) h.add(static_cast<uint64_t>(v.id));
    for (const auto& r : node->regions) r->hash_into(h);
  }
  for (Value v : outputs_) h.add(static_cast<uint64_t>(v.id));
}

pjrt::Hash128 Builder::structural_hash() const {
  pjrt::Hasher h;
  h.add(module_name_);
  hash_into(h);
  return h.finish();
}

}  // namespace torch_pjrt::hlo
