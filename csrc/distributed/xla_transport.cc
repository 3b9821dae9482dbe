#include "distributed/xla_transport.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <set>

#include "eager/device_events.h"
#include "eager/execute.h"
#include "eager/program_cache.h"
#include "backend/runtime_state.h"
#include "backend/tensor_access.h"
#include "ops/dtypes.h"

namespace torch_pjrt::distributed {
namespace {

using backend::ProgramKey;
using hlo::Collective;

int next_launch_id() {
  static std::atomic<int> counter{0};
  int id = 0;
  while (id == 0) id = ++counter;  // launch ids must be non-zero
  return id;
}

// The contents of `t` as a flat buffer: every rank's program parameter is
// f[n], whatever shape each rank's tensor has.
BufferPtr read_flat(const at::Tensor& t) {
  return backend::read_tensor(t.is_contiguous() ? t.view({-1}) : t.reshape({-1}));
}

at::Tensor flat_cat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flats;
  for (const auto& t : ts) flats.push_back(t.reshape({-1}));
  return at::cat(flats);
}

std::vector<int64_t> as_vector(const CollectiveCall::Signature& s) { return {s.begin(), s.end()}; }

// Compiles (once per key) and launches `spec` on the devices of all
// arrivals, in one launch; returns each participant's outputs.
Rendezvous::Results launch(const hlo::CollectiveSpec& spec,
                           const std::vector<Rendezvous::Arrival>& all) {
  auto& client = backend::runtime().client();
  std::set<int> seen;
  std::vector<int64_t> ids;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!seen.insert(all[r].device).second) {
      throw std::runtime_error("two ranks of the group use tpu:" + std::to_string(all[r].device) +
                               "; each rank of an in-process group needs its own device "
                               "(torch.tpu.set_device(rank))");
    }
    ids.push_back(client->device(all[r].device).id());
  }
  ProgramKey key(std::string("c10d::") + hlo::collective_name(spec.kind));
  key.dtype(static_cast<int64_t>(spec.type));
  key.shape(spec.group_size);
  for (int64_t n : spec.numels) key.shape(n);
  key.attr(static_cast<uint64_t>(spec.reduction)).attr(static_cast<uint64_t>(spec.root));
  for (int64_t id : ids) key.attr(static_cast<uint64_t>(id));
  const backend::Program& program = backend::program_for(
      key, [&](hlo::Builder& b) { hlo::build_collective_program(b, spec); },
      pjrt::CompileOptions::replicated(ids));

  std::vector<pjrt::Device> devices = program.executable()->addressable_devices();
  std::vector<size_t> owner(devices.size());
  std::vector<std::vector<const pjrt::Buffer*>> args(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    auto it = std::find(ids.begin(), ids.end(), devices[d].id());
    if (it == ids.end()) throw std::runtime_error("the collective program runs on an unknown device");
    owner[d] = static_cast<size_t>(it - ids.begin());
    for (const BufferPtr& b : all[owner[d]].buffers) args[d].push_back(b.get());
  }
  // Nothing may be queued on a participating device when the collective
  // launches. The CPU plugin prepares each replica on a pool thread, which
  // blocks while the device's in-flight limit is taken by queued work, and
  // runs each replica on a pool thread that stays in the collective's
  // rendezvous until all replicas arrive. With the pool no larger than the
  // device count, one replica in the rendezvous and another waiting for a
  // slot leave the queued work no thread to run on: the launch never
  // finishes. Every rank of the group is parked in this meeting, so
  // draining their devices here waits only for work the collective would
  // wait for anyway.
  for (const auto& arrival : all) backend::wait_for_events(arrival.device, "collective launch");
  for (const auto& per_device : args) {
    for (const pjrt::Buffer* b : per_device) b->ready_event().await("collective input ready");
  }
  pjrt::ExecuteOptions options;
  options.launch_id = next_launch_id();
  std::vector<pjrt::ExecuteResult> results = program.executable()->execute_all(args, options);
  Rendezvous::Results out(all.size());
  for (size_t d = 0; d < results.size(); ++d) {
    backend::track(all[owner[d]].device, std::move(results[d].done));
    for (auto& o : results[d].outputs) out[owner[d]].push_back(std::make_shared<pjrt::Buffer>(std::move(o)));
  }
  return out;
}

Rendezvous::Results nothing(const std::vector<Rendezvous::Arrival>& all) {
  return Rendezvous::Results(all.size());
}

}  // namespace

XlaTransport::XlaTransport(std::shared_ptr<Rendezvous> meeting, int rank, int size)
    : meeting_(std::move(meeting)), rank_(rank), size_(size) {}

Rendezvous::Outcome XlaTransport::meet(const CollectiveCall& call, const std::string& suffix,
                                       Rendezvous::Arrival mine, std::chrono::milliseconds timeout,
                                       const Rendezvous::Action& action) {
  // Keyed by sequence number only, so ranks that call different collectives
  // meet and are told so, instead of waiting at different places.
  return meeting_->meet("#" + std::to_string(call.seq) + suffix, size_, rank_, std::move(mine),
                        timeout, action);
}

c10::intrusive_ptr<TpuWork> XlaTransport::run(CollectiveCall& call, c10d::OpType type,
                                              std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> results;
  try {
    switch (call.kind) {
      case CallKind::kBarrier:
        barrier(call, timeout);
        break;
      case CallKind::kSend:
        send(call);
        break;
      case CallKind::kRecv:
        recv(call, timeout);
        results = call.outputs;
        break;
      case CallKind::kAllToAllList:
        results = exchange_uneven(call, timeout);
        break;
      case CallKind::kAllToAll:
        results = call.input_splits.empty() && call.output_splits.empty()
                      ? collective(call, timeout)
                      : exchange_uneven(call, timeout);
        break;
      default:
        results = collective(call, timeout);
    }
  } catch (const MeetingError& e) {
    throw_backend_error("tpu backend (rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + "): " + call.label() + ": " + e.what());
  }
  // The device orders every later use of the outputs after the launch.
  return TpuWork::completed(rank_, type, call.label(), results);
}

std::vector<at::Tensor> XlaTransport::collective(CollectiveCall& call,
                                                 std::chrono::milliseconds timeout) {
  const at::Tensor& any = call.inputs.empty() ? call.outputs.at(0) : call.inputs.at(0);
  int device = any.device().index();
  hlo::CollectiveSpec spec;
  spec.group_size = size_;
  spec.type = ops::to_element_type(any.scalar_type());
  spec.reduction = call.reduction;
  spec.root = call.root;
  std::vector<at::Tensor> contributed;
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
      spec.kind = Collective::kAllReduce;
      contributed = call.inputs;
      break;
    case CallKind::kBroadcast:
      spec.kind = Collective::kBroadcast;
      contributed = call.inputs;
      break;
    case CallKind::kAllGather:
      spec.kind = Collective::kAllGather;
      contributed = call.inputs;
      break;
    case CallKind::kAllGatherList:
    case CallKind::kGather:
      spec.kind = Collective::kAllGather;
      contributed = {call.inputs.at(0)};
      break;
    case CallKind::kReduceScatter:
      spec.kind = Collective::kReduceScatter;
      contributed = call.inputs;
      break;
    case CallKind::kReduceScatterList:
      spec.kind = Collective::kReduceScatter;
      contributed = {flat_cat(call.inputs)};
      break;
    case CallKind::kScatter: {
      // The root's list travels as one broadcast; each rank keeps its block.
      spec.kind = Collective::kBroadcast;
      int64_t n = call.outputs.at(0).numel();
      contributed = {rank_ == call.root ? flat_cat(call.inputs)
                                        : at::zeros({size_ * n}, call.outputs[0].options())};
      break;
    }
    case CallKind::kAllToAll:
      spec.kind = Collective::kAllToAll;
      contributed = {call.inputs.at(0)};
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "tpu backend: ", call.label(), " is not a collective");
  }
  Rendezvous::Arrival mine;
  mine.signature = as_vector(call.signature());
  mine.description = call.describe();
  mine.device = device;
  for (const at::Tensor& t : contributed) {
    spec.numels.push_back(t.numel());
    mine.buffers.push_back(read_flat(t));
  }
  if (spec.reduction == hlo::Reduction::kPremulSum &&
      (spec.kind == Collective::kAllReduce || spec.kind == Collective::kReduceScatter)) {
    mine.buffers.push_back(backend::scalar_buffer(device, spec.type, call.premul_factor));
  }
  Rendezvous::Outcome outcome = meet(
      call, "", std::move(mine), timeout,
      [&](const std::vector<Rendezvous::Arrival>& all) { return launch(spec, all); });
  std::vector<BufferPtr>& got = outcome.results;

  auto unpack = [&](const at::Tensor& whole, int64_t n) {
    for (int64_t j = 0; j < size_; ++j) {
      call.outputs[j].copy_(whole.narrow(0, j * n, n).view(call.outputs[j].sizes()));
    }
  };
  switch (call.kind) {
    case CallKind::kAllReduce:
      for (size_t i = 0; i < call.inputs.size(); ++i) backend::write_tensor(call.inputs[i], got[i]);
      return call.inputs;
    case CallKind::kReduce:
      if (rank_ == call.root) {
        for (size_t i = 0; i < call.inputs.size(); ++i) backend::write_tensor(call.inputs[i], got[i]);
      }
      return call.inputs;
    case CallKind::kBroadcast:
      if (rank_ != call.root) {
        for (size_t i = 0; i < call.inputs.size(); ++i) backend::write_tensor(call.inputs[i], got[i]);
      }
      return call.inputs;
    case CallKind::kAllGather:
    case CallKind::kReduceScatter:
    case CallKind::kReduceScatterList:
    case CallKind::kAllToAll:
      for (size_t i = 0; i < call.outputs.size(); ++i) backend::write_tensor(call.outputs[i], got[i]);
      return call.outputs;
    case CallKind::kAllGatherList:
    case CallKind::kGather: {
      if (call.kind == CallKind::kGather && rank_ != call.root) return {};
      int64_t n = call.inputs[0].numel();
      unpack(backend::wrap_buffer(got[0], any.scalar_type(), {size_ * n}, device), n);
      return call.outputs;
    }
    case CallKind::kScatter: {
      int64_t n = call.outputs[0].numel();
      at::Tensor whole = backend::wrap_buffer(got[0], any.scalar_type(), {size_ * n}, device);
      call.outputs[0].copy_(whole.narrow(0, rank_ * n, n).view(call.outputs[0].sizes()));
      return call.outputs;
    }
    default:
      return {};
  }
}

std::vector<at::Tensor> XlaTransport::exchange_uneven(CollectiveCall& call,
                                                      std::chrono::milliseconds timeout) {
  // Element counts this rank sends to and receives from each rank.
  std::vector<int64_t> sends(size_), recvs(size_);
  bool single = call.kind == CallKind::kAllToAll;
  const at::Tensor& any = single ? call.inputs.at(0) : call.inputs.at(0);
  int device = any.device().index();
  auto row_of = [](const at::Tensor& t) {
    int64_t row = 1;
    for (int64_t k = 1; k < t.dim(); ++k) row *= t.size(k);
    return row;
  };
  for (int64_t j = 0; j < size_; ++j) {
    if (single) {
      int64_t in_row = row_of(call.inputs[0]), out_row = row_of(call.outputs[0]);
      sends[j] = (call.input_splits.empty() ? call.inputs[0].size(0) / size_ : call.input_splits[j]) * in_row;
      recvs[j] = (call.output_splits.empty() ? call.outputs[0].size(0) / size_ : call.output_splits[j]) * out_row;
    } else {
      sends[j] = call.inputs[j].numel();
      recvs[j] = call.outputs[j].numel();
    }
  }
  // First meeting: everyone's counts, checked against each other.
  Rendezvous::Arrival counts;
  counts.signature = as_vector(call.signature());
  counts.description = call.describe();
  counts.info = sends;
  counts.info.insert(counts.info.end(), recvs.begin(), recvs.end());
  counts.device = device;
  Rendezvous::Outcome sized = meet(call, ":sizes", std::move(counts), timeout, nothing);
  int64_t block = 0;
  for (int64_t r = 0; r < size_; ++r) {
    for (int64_t j = 0; j < size_; ++j) {
      int64_t sent = sized.arrivals[r].info[j];
      int64_t expected = sized.arrivals[j].info[size_ + r];
      TORCH_CHECK(sent == expected, "tpu backend: ", call.label(), ": rank ", r, " sends ", sent,
                  " element(s) to rank ", j, ", which expects ", expected);
      block = std::max(block, sent);
    }
  }
  // Second meeting: every block padded to the largest, one all-to-all.
  at::Tensor flat = single ? call.inputs[0].reshape({-1}) : flat_cat(call.inputs);
  std::vector<at::Tensor> blocks;
  int64_t offset = 0;
  for (int64_t j = 0; j < size_; ++j) {
    at::Tensor piece = flat.narrow(0, offset, sends[j]);
    offset += sends[j];
    blocks.push_back(at::constant_pad_nd(piece, {0, block - sends[j]}, 0));
  }
  at::Tensor packed = block == 0 ? at::zeros({0}, any.options()) : at::cat(blocks);
  hlo::CollectiveSpec spec;
  spec.kind = Collective::kAllToAll;
  spec.group_size = size_;
  spec.type = ops::to_element_type(any.scalar_type());
  spec.numels = {size_ * block};
  if (block > 0) {
    Rendezvous::Arrival mine;
    mine.signature = as_vector(call.signature());
    mine.description = call.describe();
    mine.device = device;
    mine.buffers = {read_flat(packed)};
    Rendezvous::Outcome outcome = meet(
        call, ":data", std::move(mine), timeout,
        [&](const std::vector<Rendezvous::Arrival>& all) { return launch(spec, all); });
    packed = backend::wrap_buffer(outcome.results.at(0), any.scalar_type(), {size_ * block}, device);
  }
  std::vector<at::Tensor> pieces;
  for (int64_t j = 0; j < size_; ++j) pieces.push_back(packed.narrow(0, j * block, recvs[j]));
  if (single) {
    call.outputs[0].copy_(at::cat(pieces).view(call.outputs[0].sizes()));
  } else {
    for (int64_t j = 0; j < size_; ++j) call.outputs[j].copy_(pieces[j].view(call.outputs[j].sizes()));
  }
  return call.outputs;
}

void XlaTransport::barrier(CollectiveCall& call, std::chrono::milliseconds timeout) {
  Rendezvous::Arrival mine;
  mine.signature = as_vector(call.signature());
  mine.description = call.describe();
  meet(call, "", std::move(mine), timeout, nothing);
}

void XlaTransport::send(CollectiveCall& call) {
  const at::Tensor& t = call.inputs.at(0);
  uint64_t k = sends_[{call.root, call.tag}]++;
  Rendezvous::Arrival mine;
  mine.signature = {static_cast<int64_t>(t.scalar_type()), t.numel()};
  mine.description = call.describe();
  mine.device = t.device().index();
  mine.buffers = {read_flat(t)};  // immutable: later writes to t do not change what was sent
  meeting_->post("p2p " + std::to_string(rank_) + ">" + std::to_string(call.root) + " tag " +
                     std::to_string(call.tag) + " #" + std::to_string(k),
                 std::move(mine));
}

void XlaTransport::recv(CollectiveCall& call, std::chrono::milliseconds timeout) {
  const at::Tensor& out = call.outputs.at(0);
  uint64_t k = recvs_[{call.root, call.tag}]++;
  std::string key = "p2p " + std::to_string(call.root) + ">" + std::to_string(rank_) + " tag " +
                    std::to_string(call.tag) + " #" + std::to_string(k);
  Rendezvous::Arrival got = meeting_->take(key, timeout, "recv from rank " + std::to_string(call.root));
  TORCH_CHECK(got.signature == std::vector<int64_t>({static_cast<int64_t>(out.scalar_type()), out.numel()}),
              "tpu backend: ", call.label(), ": rank ", call.root, " sent ", got.description,
              ", but rank ", rank_, " receives into ", out.scalar_type(), out.sizes());
  BufferPtr value = got.buffers.at(0);
  int device = out.device().index();
  if (got.device != device) {
    value = std::make_shared<pjrt::Buffer>(value->copy_to(backend::runtime().client()->device(device)));
  }
  backend::write_tensor(out, std::move(value));
}

}  // namespace torch_pjrt::distributed
