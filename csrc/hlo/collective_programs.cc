#include "hlo/collective_programs.h"

namespace torch_pjrt::hlo {
namespace {

bool is_pred(ElementType t) { return t == ElementType::kPred; }

// The 0-d binary op that combines two elements for `op`, as a region body.
RegionFn combiner(Reduction op, ElementType type) {
  const char* name = "add";
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAvg:
    case Reduction::kPremulSum:
      name = is_pred(type) ? "or" : "add";
      break;
    case Reduction::kProduct:
      name = is_pred(type) ? "and" : "multiply";
      break;
    case Reduction::kMin:
      name = is_pred(type) ? "and" : "minimum";
      break;
    case Reduction::kMax:
      name = is_pred(type) ? "or" : "maximum";
      break;
    case Reduction::kBitAnd:
      name = "and";
      break;
    case Reduction::kBitOr:
      name = "or";
      break;
    case Reduction::kBitXor:
      name = "xor";
      break;
  }
  return [name](Builder& r, const std::vector<Value>& args) -> std::vector<Value> {
    return {r.binary(name, args[0], args[1])};
  };
}

Builder::ReplicaGroups whole_group(int64_t size) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < size; ++i) ids.push_back(i);
  return {ids};
}

// Divides by the group size after a sum (kAvg): floats round once in f32 or
// wider, integers truncate toward zero as C++ and NCCL do.
Value average(Builder& b, Value sum, int64_t group_size) {
  ElementType t = b.element_type(sum);
  ElementType math = (t == ElementType::kBF16 || t == ElementType::kF16) ? ElementType::kF32 : t;
  Value x = b.convert(sum, math);
  Value n = is_complex(math) ? b.convert(b.constant(double(group_size), ElementType::kF64), math)
            : is_float(math)  ? b.constant(double(group_size), math)
                              : b.constant_int(group_size, math);
  x = b.binary("divide", x, b.splat(n, b.dims(x)));
  return b.convert(x, t);
}

// The unsigned type of the same width, to move bits through an integer sum.
ElementType bits_type(ElementType t) {
  switch (pjrt::byte_width(t)) {
    case 1: return ElementType::kU8;
    case 2: return ElementType::kU16;
    case 4: return ElementType::kU32;
    default: return ElementType::kU64;
  }
}

// Broadcast without collective_broadcast (XLA:CPU has none): every replica
// but the root contributes zero bits to an integer all-reduce, so the root's
// bits arrive unchanged (NaN payloads and -0.0 included).
std::vector<Value> broadcast_by_sum(Builder& b, const std::vector<Value>& xs,
                                    const CollectiveSpec& spec) {
  ElementType bits = bits_type(spec.type);
  Value me = b.replica_id();
  Value is_root = b.compare(me, b.constant_int(spec.root, ElementType::kU32), Compare::kEq);
  std::vector<Value> contributions;
  for (Value x : xs) {
    Value raw = is_pred(spec.type) ? b.convert(x, bits) : b.bitcast_convert(x, bits);
    Value zero = b.splat(b.constant_int(0, bits), b.dims(raw));
    contributions.push_back(b.select(b.splat(is_root, b.dims(raw)), raw, zero));
  }
  std::vector<Value> sums = b.all_reduce(contributions, whole_group(spec.group_size),
                                         combiner(Reduction::kSum, bits));
  std::vector<Value> out;
  for (Value s : sums) {
    out.push_back(is_pred(spec.type)
                      ? b.compare(s, b.splat(b.constant_int(0, bits), b.dims(s)), Compare::kNe)
                      : b.bitcast_convert(s, spec.type));
  }
  return out;
}

// Complex values have no integer of their width: gather every replica's
// copy and keep the root's.
std::vector<Value> broadcast_by_gather(Builder& b, const std::vector<Value>& xs,
                                       const CollectiveSpec& spec) {
  std::vector<Value> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    int64_t n = spec.numels[i];
    Value all = b.all_gather(xs[i], 0, whole_group(spec.group_size));
    out.push_back(b.slice(all, {spec.root * n}, {(spec.root + 1) * n}, {1}));
  }
  return out;
}

// XLA's all-reduce takes the usual arithmetic (add, multiply, min, max) but
// not every backend takes bitwise combiners (XLA:CPU refuses them): those
// gather every replica's values and reduce them in the program, which is
// exact on any backend.
bool bitwise(Reduction op) {
  return op == Reduction::kBitAnd || op == Reduction::kBitOr || op == Reduction::kBitXor;
}

// Booleans travel as u8: "any" is max, "all" is min.
Reduction bool_reduction(Reduction op) {
  switch (op) {
    case Reduction::kProduct:
    case Reduction::kMin:
    case Reduction::kBitAnd:
      return Reduction::kMin;
    default:
      return Reduction::kMax;
  }
}

// Combines `xs` across the group; with `scatter`, each replica keeps its
// block of the result (reduce-scatter).
std::vector<Value> reduce_across(Builder& b, const std::vector<Value>& xs,
                                 const CollectiveSpec& spec, bool scatter) {
  Builder::ReplicaGroups group = whole_group(spec.group_size);
  Reduction op = spec.reduction;
  if (is_pred(spec.type) && op != Reduction::kBitXor) {
    std::vector<Value> bytes;
    for (Value x : xs) bytes.push_back(b.convert(x, ElementType::kU8));
    CollectiveSpec as_bytes = spec;
    as_bytes.type = ElementType::kU8;
    as_bytes.reduction = bool_reduction(op);
    std::vector<Value> out;
    for (Value y : reduce_across(b, bytes, as_bytes, scatter)) {
      out.push_back(b.compare(y, b.splat(b.constant_int(0, ElementType::kU8), b.dims(y)), Compare::kNe));
    }
    return out;
  }
  std::vector<Value> out;
  if (!bitwise(op)) {
    RegionFn combine = combiner(op, spec.type);
    if (!scatter) return b.all_reduce(xs, group, combine);
    for (Value x : xs) out.push_back(b.reduce_scatter(x, 0, group, combine));
    return out;
  }
  // Bitwise: gather [group, n], reduce over the group dim, keep a block.
  for (Value x : xs) {
    int64_t n = b.dims(x)[0];
    Value all = b.reshape(b.all_gather(x, 0, group), {spec.group_size, n});
    Value zero = b.constant_int(0, spec.type);
    Value identity = op == Reduction::kBitAnd ? b.unary("not", zero) : zero;  // all ones for AND
    Value y = b.reduce({all}, {identity}, {0}, combiner(op, spec.type))[0];
    if (scatter) {
      int64_t block = n / spec.group_size;
      Value start = b.binary("multiply", b.convert(b.replica_id(), ElementType::kS64),
                             b.constant_int(block, ElementType::kS64));
      y = b.dynamic_slice(y, {start}, {block});
    }
    out.push_back(y);
  }
  return out;
}

}  // namespace

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "send_recv";
  }
  return "collective";
}

const char* reduction_name(Reduction op) {
  switch (op) {
    case Reduction::kSum: return "sum";
    case Reduction::kAvg: return "avg";
    case Reduction::kProduct: return "product";
    case Reduction::kMin: return "min";
    case Reduction::kMax: return "max";
    case Reduction::kPremulSum: return "premul_sum";
    case Reduction::kBitAnd: return "band";
    case Reduction::kBitOr: return "bor";
    case Reduction::kBitXor: return "bxor";
  }
  return "?";
}

static bool reduces(Collective kind) {
  return kind == Collective::kAllReduce || kind == Collective::kReduceScatter;
}

std::string CollectiveSpec::describe() const {
  std::string out = collective_name(kind);
  if (reduces(kind)) out += std::string("(") + reduction_name(reduction) + ")";
  if (kind == Collective::kBroadcast) out += "(root " + std::to_string(root) + ")";
  out += " of ";
  for (size_t i = 0; i < numels.size(); ++i) {
    if (i) out += i + 1 == numels.size() ? " and " : ", ";
    out += std::string(pjrt::mlir_name(type)) + "[" + std::to_string(numels[i]) + "]";
  }
  return out + " across " + std::to_string(group_size) + " ranks";
}

pjrt::Hash128 CollectiveSpec::key() const {
  pjrt::Hasher h;
  h.add("collective").add(static_cast<uint64_t>(kind)).add(static_cast<uint64_t>(group_size));
  h.add(static_cast<uint64_t>(type)).add(static_cast<uint64_t>(reduction));
  h.add(static_cast<uint64_t>(root)).add(static_cast<uint64_t>(numels.size()));
  for (int64_t n : numels) h.add(static_cast<uint64_t>(n));
  return h.finish();
}

std::string CollectiveSpec::unsupported_reason() const {
  std::string what = describe();
  if (group_size < 1) return what + ": the group is empty";
  if (numels.empty()) return what + ": no tensors";
  if (kind == Collective::kSendRecv && (group_size != 2 || numels.size() != 1)) {
    return what + ": send/recv moves one tensor between two ranks";
  }
  if (kind == Collective::kBroadcast && (root < 0 || root >= group_size)) {
    return what + ": root " + std::to_string(root) + " is not a rank of the group";
  }
  for (int64_t n : numels) {
    if (n < 0) return what + ": negative element count";
    bool splits = kind == Collective::kReduceScatter || kind == Collective::kAllToAll;
    if (splits && n % group_size != 0) {
      return what + ": " + std::to_string(n) + " elements do not split into " +
             std::to_string(group_size) + " equal blocks";
    }
  }
  if (!reduces(kind)) return "";
  bool bitwise = reduction == Reduction::kBitAnd || reduction == Reduction::kBitOr ||
                 reduction == Reduction::kBitXor;
  if (bitwise && !is_integral(type)) {
    return what + ": bitwise reductions need integer or bool tensors";
  }
  if (is_pred(type) && (reduction == Reduction::kAvg || reduction == Reduction::kPremulSum)) {
    return what + ": cannot average bool tensors";
  }
  if (is_complex(type) && (reduction == Reduction::kMin || reduction == Reduction::kMax)) {
    return what + ": complex numbers have no order";
  }
  return "";
}

int64_t collective_output_numel(const CollectiveSpec& spec, size_t i) {
  int64_t n = spec.numels.at(i);
  switch (spec.kind) {
    case Collective::kAllGather: return n * spec.group_size;
    case Collective::kReduceScatter: return n / spec.group_size;
    default: return n;
  }
}

void build_collective_program(Builder& b, const CollectiveSpec& spec) {
  if (std::string why = spec.unsupported_reason(); !why.empty()) throw BuildError(why);
  std::vector<Value> xs;
  for (int64_t n : spec.numels) xs.push_back(b.parameter(TensorType{spec.type, {n}}));
  if (spec.reduction == Reduction::kPremulSum && reduces(spec.kind)) {
    Value factor = b.parameter(TensorType{spec.type, {}});
    for (Value& x : xs) x = b.binary("multiply", x, b.splat(factor, b.dims(x)));
  }
  Builder::ReplicaGroups group = whole_group(spec.group_size);
  std::vector<Value> out;
  switch (spec.kind) {
    case Collective::kAllReduce:
      out = reduce_across(b, xs, spec, /*scatter=*/false);
      break;
    case Collective::kReduceScatter:
      out = reduce_across(b, xs, spec, /*scatter=*/true);
      break;
    case Collective::kBroadcast:
      out = is_complex(spec.type) ? broadcast_by_gather(b, xs, spec) : broadcast_by_sum(b, xs, spec);
      break;
    case Collective::kAllGather:
      for (Value x : xs) out.push_back(b.all_gather(x, 0, group));
      break;
    case Collective::kAllToAll:
      for (Value x : xs) out.push_back(b.all_to_all(x, 0, 0, group));
      break;
    case Collective::kSendRecv:
      out.push_back(b.collective_permute(xs[0], {{0, 1}}));
      break;
  }
  if (spec.reduction == Reduction::kAvg && reduces(spec.kind)) {
    for (Value& y : out) y = average(b, y, spec.group_size);
  }
  b.set_outputs(out);
}

}  // namespace torch_pjrt::hlo
