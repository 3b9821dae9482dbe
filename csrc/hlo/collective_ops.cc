// The StableHLO collective ops of Builder. Kept apart from builder.cc: they
// only make sense in programs compiled for several devices at once.
#include <string>

#include "hlo/builder.h"

namespace torch_pjrt::hlo {
namespace {

[[noreturn]] void fail(const std::string& op, const std::string& why) {
  throw BuildError("stablehlo." + op + ": " + why);
}

// dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>; checks the groups are equal-sized.
std::string groups_attr(const std::string& op, const Builder::ReplicaGroups& groups) {
  if (groups.empty() || groups[0].empty()) fail(op, "needs at least one non-empty replica group");
  size_t size = groups[0].size();
  std::string body;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() != size) fail(op, "replica groups must all have the same size");
    body += g ? ", [" : "[";
    for (size_t i = 0; i < size; ++i) body += (i ? ", " : "") + std::to_string(groups[g][i]);
    body += "]";
  }
  return "replica_groups = dense<[" + body + "]> : tensor<" + std::to_string(groups.size()) + "x" +
         std::to_string(size) + "xi64>";
}

int64_t group_size(const Builder::ReplicaGroups& groups) {
  return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
}

void check_dim(const std::string& op, int64_t dim, const TensorType& t) {
  if (dim < 0 || dim >= t.rank()) {
    fail(op, "dimension " + std::to_string(dim) + " out of range for " + t.mlir());
  }
}

}  // namespace

std::vector<Value> Builder::all_reduce(const std::vector<Value>& xs, const ReplicaGroups& groups,
                                       const RegionFn& combine) {
  if (xs.empty()) fail("all_reduce", "needs an operand");
  std::string attrs = groups_attr("all_reduce", groups);
  ElementType element = type(xs[0]).type;
  std::vector<TensorType> results;
  for (Value x : xs) {
    if (type(x).type != element) fail("all_reduce", "operands must share one element type");
    results.push_back(type(x));
  }
  std::vector<std::unique_ptr<Builder>> regions;
  TensorType scalar{element, {}};
  regions.push_back(region({scalar, scalar}, combine));
  return add_multi("all_reduce", xs, attrs, results, std::move(regions));
}

Value Builder::all_gather(Value x, int64_t dim, const ReplicaGroups& groups) {
  std::string attrs = groups_attr("all_gather", groups);
  TensorType out = type(x);
  check_dim("all_gather", dim, out);
  out.dims[dim] *= group_size(groups);
  return add_node("all_gather", {x}, "all_gather_dim = " + std::to_string(dim) + " : i64, " + attrs,
                  {out});
}

Value Builder::reduce_scatter(Value x, int64_t dim, const ReplicaGroups& groups,
                              const RegionFn& combine) {
  std::string attrs = groups_attr("reduce_scatter", groups);
  TensorType out = type(x);
  check_dim("reduce_scatter", dim, out);
  if (out.dims[dim] % group_size(groups) != 0) {
    fail("reduce_scatter", "dimension " + std::to_string(dim) + " of " + out.mlir() +
                               " does not split into " + std::to_string(group_size(groups)));
  }
  out.dims[dim] /= group_size(groups);
  std::vector<std::unique_ptr<Builder>> regions;
  TensorType scalar{out.type, {}};
  regions.push_back(region({scalar, scalar}, combine));
  return add_node("reduce_scatter", {x}, "scatter_dimension = " + std::to_string(dim) + " : i64, " + attrs,
                  {out}, std::move(regions));
}

Value Builder::all_to_all(Value x, int64_t split_dim, int64_t concat_dim,
                          const ReplicaGroups& groups) {
  std::string attrs = groups_attr("all_to_all", groups);
  TensorType out = type(x);
  check_dim("all_to_all", split_dim, out);
  check_dim("all_to_all", concat_dim, out);
  int64_t n = group_size(groups);
  if (out.dims[split_dim] % n != 0) {
    fail("all_to_all", "dimension " + std::to_string(split_dim) + " of " + out.mlir() +
                           " does not split into " + std::to_string(n));
  }
  out.dims[split_dim] /= n;
  out.dims[concat_dim] *= n;
  return add_node("all_to_all", {x},
                  "split_dimension = " + std::to_string(split_dim) +
                      " : i64, concat_dimension = " + std::to_string(concat_dim) +
                      " : i64, split_count = " + std::to_string(n) + " : i64, " + attrs,
                  {out});
}

Value Builder::collective_permute(Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  if (pairs.empty()) fail("collective_permute", "needs at least one source-target pair");
  std::string body;
  for (size_t i = 0; i < pairs.size(); ++i) {
    body += (i ? ", [" : "[") + std::to_string(pairs[i].first) + ", " +
            std::to_string(pairs[i].second) + "]";
  }
  return add_node("collective_permute", {x},
                  "source_target_pairs = dense<[" + body + "]> : tensor<" +
                      std::to_string(pairs.size()) + "x2xi64>",
                  {type(x)});
}

Value Builder::replica_id() {
  return add_node("replica_id", {}, "", {TensorType{ElementType::kU32, {}}});
}

}  // namespace torch_pjrt::hlo
