#include "distributed/host_pipeline.h"

#include <ATen/ATen.h>

#include "backend/runtime_state.h"
#include "backend/tensor_access.h"
#include "distributed/host_reductions.h"
#include "ops/dtypes.h"

namespace torch_pjrt::distributed {
namespace {

size_t add_pending(HostJob& job, const at::Tensor& t) {
  auto& client = backend::runtime().client();
  pjrt::PendingBuffer pending = pjrt::PendingBuffer::create(
      client, client->device(t.device().index()), ops::to_element_type(t.scalar_type()),
      std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
  backend::write_tensor(t, std::make_shared<pjrt::Buffer>(pending.take_buffer()));
  job.pending.push_back(std::move(pending));
  return job.pending.size() - 1;
}

}  // namespace

bool pipelines(const CollectiveCall& call) {
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
    case CallKind::kBroadcast:
    case CallKind::kAllGather:
    case CallKind::kReduceScatter:
      break;
    default:
      return false;
  }
  if (backend::runtime().client()->platform_name() != "cpu") return false;  // raw layout
  int64_t bytes = 0;
  for (const auto& t : call.inputs) bytes += static_cast<int64_t>(t.nbytes());
  return bytes >= 2 * kPieceBytes;
}

std::vector<at::Tensor> build_pipeline(const CollectiveCall& call, int rank, int size,
                                       const c10::intrusive_ptr<c10d::Backend>& gloo,
                                       HostStaging& staging, HostJob& job) {
  bool root = rank == call.root;
  hlo::Reduction reduction = call.reduction;
  double factor = call.premul_factor;
  c10d::ReduceOp op = gloo_op(reduction);
  int64_t root_rank = call.root;
  bool gather = call.kind == CallKind::kAllGather;
  bool scatter = call.kind == CallKind::kReduceScatter;
  bool in_place = !gather && !scatter;

  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const at::Tensor& input = call.inputs[i];
    if (input.numel() == 0) continue;
    // Whose contents are read, and which tensor receives the result here.
    bool reads = call.kind != CallKind::kBroadcast || root;
    bool writes = call.kind == CallKind::kAllReduce || gather || scatter ||
                  (call.kind == CallKind::kReduce && root) ||
                  (call.kind == CallKind::kBroadcast && !root);
    const at::Tensor& target = in_place ? input : call.outputs[i];

    at::Tensor host_in = staging.take(input.sizes(), input.scalar_type()).view({-1});
    job.pooled.push_back(host_in);
    at::Tensor host_out = host_in;
    if (!in_place) {
      host_out = staging.take(target.sizes(), target.scalar_type()).view({-1});
      job.pooled.push_back(host_out);
    }
    std::shared_ptr<pjrt::Buffer> source;
    if (reads) {
      source = backend::read_tensor(input);
      job.sources.push_back(source);
    }
    size_t pending = writes ? add_pending(job, target) : 0;

    int64_t item = static_cast<int64_t>(input.element_size());
    // A piece covers [e0, e1) of each rank's block: the whole tensor for
    // the in-place kinds, the input for all_gather, the output for reduce_scatter.
    int64_t block = scatter ? target.numel() : input.numel();
    int64_t step = std::max<int64_t>(1, kPieceBytes / item);
    char* in_bytes = static_cast<char*>(host_in.data_ptr());
    char* out_bytes = static_cast<char*>(host_out.data_ptr());
    for (int64_t e0 = 0; e0 < block; e0 += step) {
      int64_t len = std::min(step, block - e0);
      bool last = e0 + len == block;
      HostPiece piece;
      if (reads) {
        int64_t copies = scatter ? size : 1;
        for (int64_t r = 0; r < copies; ++r) {
          int64_t at = (r * block + e0) * item;
          piece.reads.push_back(source->copy_raw_to_host_async(in_bytes + at, at, len * item));
        }
      }
      at::Tensor in_piece = host_in.narrow(0, e0, len);
      at::Tensor out_piece = host_out.narrow(0, e0, len);
      switch (call.kind) {
        case CallKind::kAllReduce:
          piece.start = [gloo, in_piece, op, reduction, factor]() {
            premultiply(in_piece, reduction, factor);
            std::vector<at::Tensor> one{in_piece};
            c10d::AllreduceOptions o;
            o.reduceOp = op;
            return Works{gloo->allreduce(one, o)};
          };
          break;
        case CallKind::kReduce:
          piece.start = [gloo, in_piece, op, reduction, factor, root_rank]() {
            premultiply(in_piece, reduction, factor);
            std::vector<at::Tensor> one{in_piece};
            c10d::ReduceOptions o;
            o.reduceOp = op;
            o.rootRank = root_rank;
            return Works{gloo->reduce(one, o)};
          };
          break;
        case CallKind::kBroadcast:
          piece.start = [gloo, in_piece, root_rank]() {
            std::vector<at::Tensor> one{in_piece};
            c10d::BroadcastOptions o;
            o.rootRank = root_rank;
            return Works{gloo->broadcast(one, o)};
          };
          break;
        case CallKind::kAllGather: {
          std::vector<at::Tensor> outs;
          for (int64_t r = 0; r < size; ++r) outs.push_back(host_out.narrow(0, r * block + e0, len));
          piece.start = [gloo, in_piece, outs]() {
            std::vector<std::vector<at::Tensor>> lists{outs};
            std::vector<at::Tensor> one{in_piece};
            return Works{gloo->allgather(lists, one)};
          };
          break;
        }
        case CallKind::kReduceScatter: {
          std::vector<at::Tensor> ins;
          for (int64_t r = 0; r < size; ++r) ins.push_back(host_in.narrow(0, r * block + e0, len));
          piece.start = [gloo, ins, out_piece, op, reduction, factor]() {
            for (const auto& t : ins) premultiply(t, reduction, factor);
            std::vector<std::vector<at::Tensor>> lists{ins};
            std::vector<at::Tensor> one{out_piece};
            c10d::ReduceScatterOptions o;
            o.reduceOp = op;
            return Works{gloo->reduce_scatter(one, lists, o)};
          };
          break;
        }
        default:
          break;
      }
      if (writes) {
        at::Tensor result = in_place ? in_piece : out_piece;
        if (!gather) piece.after = [result, reduction, size]() { average(result, reduction, size); };
        if (gather) {
          for (int64_t r = 0; r < size; ++r) {
            int64_t at = (r * block + e0) * item;
            piece.fills.push_back({pending, out_bytes + at, at, len * item, last && r == size - 1});
          }
        } else {
          char* from = in_place ? in_bytes : out_bytes;
          piece.fills.push_back({pending, from + e0 * item, e0 * item, len * item, last});
        }
      }
      job.pieces.push_back(std::move(piece));
    }
  }
  return in_place ? call.inputs : call.outputs;
}

}  // namespace torch_pjrt::distributed
