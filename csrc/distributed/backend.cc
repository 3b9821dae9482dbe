#include "distributed/backend.h"

#include <Python.h>
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <random>

#include "distributed/host_transport.h"
#include "distributed/rendezvous.h"
#include "distributed/xla_transport.h"

namespace torch_pjrt::distributed {
namespace {

// Names this process among all the ranks' processes: host, pid and a random
// number (pids repeat across machines and containers).
const std::string& process_token() {
  static const std::string token = [] {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    std::random_device random;
    return std::string(host) + ":" + std::to_string(getpid()) + ":" +
           std::to_string((uint64_t(random()) << 32) | random());
  }();
  return token;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

c10::intrusive_ptr<TpuBackend> TpuBackend::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout,
                                                  HostFactory make_host) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "tpu backend: rank ", rank,
              " is not in a group of ", size);
  // Waiting on the store must not hold the GIL: the other ranks may be
  // threads of this process that need it to arrive.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();

  const std::string& token = process_token();
  store->set("torch_pjrt/process/" + std::to_string(rank), bytes_of(token));
  bool here = true;
  for (int r = 0; r < size; ++r) {
    here = here && string_of(store->get("torch_pjrt/process/" + std::to_string(r))) == token;
  }
  std::unique_ptr<Transport> transport;
  if (here) {
    static std::atomic<uint64_t> groups{0};
    std::string key;
    if (rank == 0) {
      key = token + "/group" + std::to_string(groups++);
      store->set("torch_pjrt/meeting", bytes_of(key));
    } else {
      key = string_of(store->get("torch_pjrt/meeting"));
    }
    transport = std::make_unique<XlaTransport>(Rendezvous::shared(key, size), rank, size);
  } else {
    TORCH_CHECK(make_host, "tpu backend: ranks live in several processes, and no host "
                           "transport was given");
    c10::intrusive_ptr<c10d::Backend> host;
    {
      no_gil.reset();  // building the gloo group runs Python
      pybind11::gil_scoped_acquire gil;
      host = make_host(store, rank, size, timeout);
    }
    transport = std::make_unique<HostTransport>(std::move(host), rank, size);
  }
  return c10::make_intrusive<TpuBackend>(store, rank, size, timeout, std::move(transport),
                                         std::move(make_host));
}

TpuBackend::TpuBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, std::unique_ptr<Transport> transport,
                       HostFactory make_host)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      options_(c10::make_intrusive<Options>("tpu", timeout)),
      transport_(std::move(transport)),
      make_host_(std::move(make_host)) {
  init();
}

c10::intrusive_ptr<c10d::Backend> TpuBackend::split(const c10::intrusive_ptr<c10d::Store>&,
                                                    const std::vector<int>& ranks,
                                                    const c10::intrusive_ptr<Options>& opts) {
  // Every rank of this group calls split once per split_group, members or
  // not, so a count of splits names the new group alike on all its ranks.
  // The store torch passes is named after the new group, and torch's name
  // counts the groups each rank has joined, which differs between ranks
  // once a subgroup has excluded some: meeting there could wait forever.
  uint64_t k = splits_++;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  auto it = std::find(sorted.begin(), sorted.end(), getRank());
  if (it == sorted.end()) return nullptr;  // not a member of the new group
  std::string prefix = "torch_pjrt/split" + std::to_string(k);
  for (int r : sorted) prefix += "_" + std::to_string(r);
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  std::chrono::milliseconds timeout = opts ? opts->timeout : options_->timeout;
  return create(store, static_cast<int>(it - sorted.begin()), static_cast<int>(sorted.size()),
                timeout, make_host_);
}

std::chrono::milliseconds TpuBackend::timeout_or_default(std::chrono::milliseconds t) const {
  return t == c10d::kUnsetTimeout ? options_->timeout : t;
}

hlo::Reduction TpuBackend::reduction(const c10d::ReduceOp& op,
                                     const std::vector<at::Tensor>& tensors, const char* name,
                                     double* factor) const {
  c10::ScalarType dtype = tensors.empty() ? c10::kFloat : tensors[0].scalar_type();
  return reduction_of(op, dtype, name, factor);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::run(CollectiveCall call, c10d::OpType type,
                                               std::chrono::milliseconds timeout) {
  check_call(call, getRank(), getSize());
  count_call(call);
  std::lock_guard<std::mutex> lock(mutex_);
  if (call.kind != CallKind::kSend && call.kind != CallKind::kRecv) call.seq = seq_++;
  return transport_->run(call, type, timeout_or_default(timeout));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kBroadcast;
  call.inputs = tensors;
  call.root = opts.rootRank;
  return run(std::move(call), c10d::OpType::BROADCAST, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllReduce;
  call.inputs = tensors;
  call.reduction = reduction(opts.reduceOp, tensors, "all_reduce", &call.premul_factor);
  return run(std::move(call), c10d::OpType::ALLREDUCE, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllReduce;
  call.inputs = tensors;
  call.reduction = reduction(opts.reduceOp, tensors, "all_reduce_coalesced", &call.premul_factor);
  return run(std::move(call), c10d::OpType::ALLREDUCE_COALESCED, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kReduce;
  call.inputs = tensors;
  call.root = opts.rootRank;
  call.reduction = reduction(opts.reduceOp, tensors, "reduce", &call.premul_factor);
  return run(std::move(call), c10d::OpType::REDUCE, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "tpu backend: all_gather takes one "
              "input tensor and one list of outputs per call");
  CollectiveCall call;
  call.kind = CallKind::kAllGatherList;
  call.inputs = inputs;
  call.outputs = outputs[0];
  return run(std::move(call), c10d::OpType::ALLGATHER, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllGather;
  call.inputs = {input};
  call.outputs = {output};
  return run(std::move(call), c10d::OpType::_ALLGATHER_BASE, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllGather;
  call.inputs = inputs;
  call.outputs = outputs;
  return run(std::move(call), c10d::OpType::COALESCED, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "tpu backend: gather takes one input tensor");
  CollectiveCall call;
  call.kind = CallKind::kGather;
  call.inputs = inputs;
  call.root = opts.rootRank;
  if (getRank() == opts.rootRank) {
    TORCH_CHECK(outputs.size() == 1, "tpu backend: gather needs one list of outputs on the root");
    call.outputs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "tpu backend: gather takes no outputs on a rank that is not the root");
  }
  return run(std::move(call), c10d::OpType::GATHER, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "tpu backend: scatter takes one output tensor");
  CollectiveCall call;
  call.kind = CallKind::kScatter;
  call.outputs = outputs;
  call.root = opts.rootRank;
  if (getRank() == opts.rootRank) {
    TORCH_CHECK(inputs.size() == 1, "tpu backend: scatter needs one list of inputs on the root");
    call.inputs = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "tpu backend: scatter takes no inputs on a rank that is not the root");
  }
  return run(std::move(call), c10d::OpType::SCATTER, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, "tpu backend: reduce_scatter takes one "
              "output tensor and one list of inputs per call");
  CollectiveCall call;
  call.kind = CallKind::kReduceScatterList;
  call.inputs = inputs[0];
  call.outputs = outputs;
  call.reduction = reduction(opts.reduceOp, outputs, "reduce_scatter", &call.premul_factor);
  return run(std::move(call), c10d::OpType::REDUCE_SCATTER, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kReduceScatter;
  call.inputs = {input};
  call.outputs = {output};
  call.reduction = reduction(opts.reduceOp, call.outputs, "reduce_scatter_tensor", &call.premul_factor);
  return run(std::move(call), c10d::OpType::_REDUCE_SCATTER_BASE, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kReduceScatter;
  call.inputs = inputs;
  call.outputs = outputs;
  call.reduction = reduction(opts.reduceOp, outputs, "reduce_scatter_tensor_coalesced",
                             &call.premul_factor);
  return run(std::move(call), c10d::OpType::COALESCED, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_splits,
                                                         std::vector<int64_t>& input_splits,
                                                         const c10d::AllToAllOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllToAll;
  call.inputs = {input};
  call.outputs = {output};
  call.output_splits = output_splits;
  call.input_splits = input_splits;
  return run(std::move(call), c10d::OpType::ALLTOALL_BASE, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kAllToAllList;
  call.inputs = inputs;
  call.outputs = outputs;
  return run(std::move(call), c10d::OpType::ALLTOALL, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                int tag) {
  TORCH_CHECK(tensors.size() == 1, "tpu backend: send takes one tensor");
  CollectiveCall call;
  call.kind = CallKind::kSend;
  call.inputs = tensors;
  call.root = dst;
  call.tag = tag;
  return run(std::move(call), c10d::OpType::SEND, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                int tag) {
  TORCH_CHECK(tensors.size() == 1, "tpu backend: recv takes one tensor");
  CollectiveCall call;
  call.kind = CallKind::kRecv;
  call.outputs = tensors;
  call.root = src;
  call.tag = tag;
  return run(std::move(call), c10d::OpType::RECV, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "tpu backend: recv without a source rank is not supported; pass src=");
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  CollectiveCall call;
  call.kind = CallKind::kBarrier;
  return run(std::move(call), c10d::OpType::BARRIER, opts.timeout);
}

}  // namespace torch_pjrt::distributed
