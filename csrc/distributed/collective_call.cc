#include "distributed/collective_call.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

namespace torch_pjrt::distributed {
namespace {

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

}  // namespace

std::string dtype_name(c10::ScalarType dtype) {
  return "torch." + std::string(c10::getDtypeNames(dtype).first);
}

namespace {

std::string shapes_of(const std::vector<at::Tensor>& ts) {
  std::ostringstream out;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) out << ", ";
    out << dtype_name(ts[i].scalar_type()) << ts[i].sizes();
  }
  return out.str();
}

bool reduces(CallKind kind) {
  return kind == CallKind::kAllReduce || kind == CallKind::kReduce ||
         kind == CallKind::kReduceScatter || kind == CallKind::kReduceScatterList;
}

}  // namespace

const char* call_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce: return "all_reduce";
    case CallKind::kBroadcast: return "broadcast";
    case CallKind::kReduce: return "reduce";
    case CallKind::kAllGather: return "all_gather_into_tensor";
    case CallKind::kAllGatherList: return "all_gather";
    case CallKind::kReduceScatter: return "reduce_scatter_tensor";
    case CallKind::kReduceScatterList: return "reduce_scatter";
    case CallKind::kAllToAll: return "all_to_all_single";
    case CallKind::kAllToAllList: return "all_to_all";
    case CallKind::kGather: return "gather";
    case CallKind::kScatter: return "scatter";
    case CallKind::kSend: return "send";
    case CallKind::kRecv: return "recv";
    case CallKind::kBarrier: return "barrier";
  }
  return "collective";
}

CollectiveCall::Signature CollectiveCall::signature() const {
  const std::vector<at::Tensor>& any = inputs.empty() ? outputs : inputs;
  int64_t dtype = any.empty() ? -1 : static_cast<int64_t>(any[0].scalar_type());
  int64_t agreed = 0;
  switch (kind) {
    case CallKind::kAllReduce:
    case CallKind::kBroadcast:
    case CallKind::kReduce:
    case CallKind::kAllGather:
    case CallKind::kAllGatherList:
    case CallKind::kGather:
      agreed = total_numel(inputs);
      break;
    case CallKind::kReduceScatter:
    case CallKind::kReduceScatterList:
    case CallKind::kScatter:
      agreed = total_numel(outputs);
      break;
    case CallKind::kAllToAll:
      agreed = input_splits.empty() && output_splits.empty() ? total_numel(inputs) : -1;
      break;
    default:
      agreed = 0;
  }
  int64_t count = kind == CallKind::kScatter || kind == CallKind::kGather ? 1
                                                                          : static_cast<int64_t>(any.size());
  return {static_cast<int64_t>(kind), dtype,
          reduces(kind) ? static_cast<int64_t>(reduction) : -1,
          kind == CallKind::kBroadcast || kind == CallKind::kReduce || kind == CallKind::kGather ||
                  kind == CallKind::kScatter
              ? root
              : -1,
          agreed, count};
}

std::string describe_signature(const CollectiveCall::Signature& s) {
  std::ostringstream out;
  out << call_name(static_cast<CallKind>(s[0]));
  if (s[2] >= 0) out << "(" << hlo::reduction_name(static_cast<hlo::Reduction>(s[2])) << ")";
  if (s[3] >= 0) out << "(root " << s[3] << ")";
  if (s[1] >= 0) out << " of " << dtype_name(static_cast<c10::ScalarType>(s[1]));
  if (s[4] >= 0) out << " with " << s[4] << " element(s)";
  if (s[5] > 1) out << " in " << s[5] << " tensors";
  return out.str();
}

std::string CollectiveCall::describe() const {
  std::ostringstream out;
  out << call_name(kind);
  if (reduces(kind)) out << "(" << hlo::reduction_name(reduction) << ")";
  if (kind == CallKind::kBroadcast || kind == CallKind::kReduce || kind == CallKind::kGather ||
      kind == CallKind::kScatter) {
    out << "(root " << root << ")";
  }
  if (!inputs.empty()) out << " of " << shapes_of(inputs);
  if (!outputs.empty() && kind != CallKind::kAllReduce && kind != CallKind::kBroadcast) {
    out << " into " << shapes_of(outputs);
  }
  return out.str();
}

std::string CollectiveCall::label() const {
  return std::string(call_name(kind)) + " #" + std::to_string(seq);
}

hlo::Reduction reduction_of(const c10d::ReduceOp& op, c10::ScalarType dtype, const char* op_name,
                            double* premul_factor) {
  bool is_bool = dtype == c10::kBool;
  bool integral = c10::isIntegralType(dtype, /*includeBool=*/true);
  auto unsupported = [&](const char* why) {
    TORCH_CHECK(false, "tpu backend: ", op_name, " cannot use ReduceOp.", why, " with ",
                dtype_name(dtype), " tensors");
  };
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return hlo::Reduction::kSum;
    case c10d::ReduceOp::PRODUCT: return hlo::Reduction::kProduct;
    case c10d::ReduceOp::MIN:
      if (c10::isComplexType(dtype)) unsupported("MIN");
      return hlo::Reduction::kMin;
    case c10d::ReduceOp::MAX:
      if (c10::isComplexType(dtype)) unsupported("MAX");
      return hlo::Reduction::kMax;
    case c10d::ReduceOp::AVG:
      if (is_bool) unsupported("AVG");
      return hlo::Reduction::kAvg;
    case c10d::ReduceOp::BAND:
      if (!integral) unsupported("BAND");
      return hlo::Reduction::kBitAnd;
    case c10d::ReduceOp::BOR:
      if (!integral) unsupported("BOR");
      return hlo::Reduction::kBitOr;
    case c10d::ReduceOp::BXOR:
      if (!integral) unsupported("BXOR");
      return hlo::Reduction::kBitXor;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (is_bool) unsupported("PREMUL_SUM");
      auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "tpu backend: ", op_name,
                  ": ReduceOp.PREMUL_SUM carries no factor");
      *premul_factor = supplement->tensor_factor.defined()
                           ? supplement->tensor_factor.to(at::kCPU, at::kDouble).item<double>()
                           : supplement->double_factor;
      return hlo::Reduction::kPremulSum;
    }
    default:
      break;
  }
  TORCH_CHECK(false, "tpu backend: ", op_name, " does not support ReduceOp ",
              static_cast<int>(op.op_));
}

void check_call(const CollectiveCall& call, int rank, int size) {
  const char* name = call_name(call.kind);
  std::vector<const at::Tensor*> all;
  for (const auto& t : call.inputs) all.push_back(&t);
  for (const auto& t : call.outputs) all.push_back(&t);
  for (const at::Tensor* t : all) {
    TORCH_CHECK(t->defined(), "tpu backend: ", name, " got an undefined tensor");
    TORCH_CHECK(t->is_privateuseone(), "tpu backend: ", name, " needs tpu tensors, got one on ",
                t->device(), "; use the gloo backend for CPU tensors (init_process_group(\"cpu:gloo,tpu:tpu\"))");
    TORCH_CHECK(!t->is_sparse(), "tpu backend: ", name, " does not support sparse tensors");
  }
  if (!all.empty()) {
    c10::ScalarType dtype = all[0]->scalar_type();
    for (const at::Tensor* t : all) {
      TORCH_CHECK(t->scalar_type() == dtype, "tpu backend: ", name,
                  " needs all tensors of one dtype, got ", dtype, " and ", t->scalar_type());
    }
  }
  bool rooted = call.kind == CallKind::kBroadcast || call.kind == CallKind::kReduce ||
                call.kind == CallKind::kGather || call.kind == CallKind::kScatter ||
                call.kind == CallKind::kSend || call.kind == CallKind::kRecv;
  if (rooted) {
    TORCH_CHECK(call.root >= 0 && call.root < size, "tpu backend: ", name, ": rank ", call.root,
                " is not in this group of ", size, " rank(s)");
  }
  int64_t in = total_numel(call.inputs), out = total_numel(call.outputs);
  switch (call.kind) {
    case CallKind::kAllGather:
      TORCH_CHECK(call.inputs.size() == call.outputs.size(), "tpu backend: ", name,
                  " needs one output per input");
      for (size_t i = 0; i < call.inputs.size(); ++i) {
        TORCH_CHECK(call.outputs[i].numel() == call.inputs[i].numel() * size,
                    "tpu backend: ", name, ": output ", call.outputs[i].sizes(),
                    " must hold world_size (", size, ") times the input ", call.inputs[i].sizes());
      }
      break;
    case CallKind::kAllGatherList:
    case CallKind::kReduceScatterList:
    case CallKind::kAllToAllList: {
      const auto& list = call.kind == CallKind::kAllGatherList ? call.outputs : call.inputs;
      TORCH_CHECK(static_cast<int>(list.size()) == size, "tpu backend: ", name, " needs ", size,
                  " tensors (one per rank), got ", list.size());
      if (call.kind != CallKind::kAllToAllList) {
        const at::Tensor& one = call.kind == CallKind::kAllGatherList ? call.inputs.at(0)
                                                                      : call.outputs.at(0);
        for (const auto& t : list) {
          TORCH_CHECK(t.numel() == one.numel(), "tpu backend: ", name, ": every tensor of the list must have ",
                      one.numel(), " element(s) like ", one.sizes(), ", got ", t.sizes());
        }
      } else {
        TORCH_CHECK(static_cast<int>(call.outputs.size()) == size, "tpu backend: ", name,
                    " needs ", size, " output tensors, got ", call.outputs.size());
      }
      break;
    }
    case CallKind::kReduceScatter:
      TORCH_CHECK(call.inputs.size() == call.outputs.size(), "tpu backend: ", name,
                  " needs one output per input");
      for (size_t i = 0; i < call.inputs.size(); ++i) {
        TORCH_CHECK(call.inputs[i].numel() == call.outputs[i].numel() * size,
                    "tpu backend: ", name, ": input ", call.inputs[i].sizes(),
                    " must hold world_size (", size, ") times the output ", call.outputs[i].sizes());
      }
      break;
    case CallKind::kAllToAll: {
      TORCH_CHECK(call.inputs.size() == 1 && call.outputs.size() == 1, "tpu backend: ", name,
                  " takes one input and one output");
      const at::Tensor& input = call.inputs[0];
      const at::Tensor& output = call.outputs[0];
      auto check_splits = [&](const std::vector<int64_t>& splits, const at::Tensor& t,
                              const char* which) {
        if (splits.empty()) {
          TORCH_CHECK(t.dim() > 0 && t.size(0) % size == 0, "tpu backend: ", name, ": the ", which,
                      " ", t.sizes(), " does not split into ", size, " equal parts along dim 0");
          return;
        }
        TORCH_CHECK(static_cast<int>(splits.size()) == size, "tpu backend: ", name, ": ", which,
                    " split sizes need ", size, " entries, got ", splits.size());
        int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t{0});
        TORCH_CHECK(t.dim() > 0 && sum == t.size(0), "tpu backend: ", name, ": ", which,
                    " split sizes add up to ", sum, ", but dim 0 of ", t.sizes(), " is ",
                    t.dim() > 0 ? t.size(0) : 0);
      };
      check_splits(call.input_splits, input, "input");
      check_splits(call.output_splits, output, "output");
      TORCH_CHECK(input.dim() == output.dim() &&
                      input.sizes().slice(1) == output.sizes().slice(1),
                  "tpu backend: ", name, ": input ", input.sizes(), " and output ", output.sizes(),
                  " must agree beyond dim 0");
      break;
    }
    case CallKind::kGather:
      if (rank == call.root) {
        TORCH_CHECK(static_cast<int>(call.outputs.size()) == size, "tpu backend: ", name,
                    " needs ", size, " output tensors on the root, got ", call.outputs.size());
        for (const auto& t : call.outputs) {
          TORCH_CHECK(t.numel() == in, "tpu backend: ", name, ": output ", t.sizes(),
                      " must match the input ", call.inputs.at(0).sizes());
        }
      }
      break;
    case CallKind::kScatter:
      if (rank == call.root) {
        TORCH_CHECK(static_cast<int>(call.inputs.size()) == size, "tpu backend: ", name,
                    " needs ", size, " input tensors on the root, got ", call.inputs.size());
        for (const auto& t : call.inputs) {
          TORCH_CHECK(t.numel() == out, "tpu backend: ", name, ": input ", t.sizes(),
                      " must match the output ", call.outputs.at(0).sizes());
        }
      }
      break;
    default:
      break;
  }
}

namespace {
std::mutex counts_mutex;
std::map<std::string, int64_t> counts;
std::atomic<int64_t> bytes{0};
}  // namespace

void count_call(const CollectiveCall& call) {
  int64_t n = 0;
  for (const auto& t : call.inputs) n += static_cast<int64_t>(t.nbytes());
  bytes += n;
  std::lock_guard<std::mutex> lock(counts_mutex);
  counts[call_name(call.kind)]++;
}

std::vector<std::pair<std::string, int64_t>> call_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex);
  return {counts.begin(), counts.end()};
}

int64_t call_bytes() { return bytes.load(); }

void reset_call_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex);
  counts.clear();
  bytes = 0;
}

}  // namespace torch_pjrt::distributed
