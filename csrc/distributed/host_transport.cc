#include "distributed/host_transport.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/runtime_state.h"
#include "distributed/host_pipeline.h"
#include "distributed/host_reductions.h"
#include "distributed/host_staging.h"
#include "backend/tensor_access.h"
#include "ops/dtypes.h"
#include "pjrt/pending_buffer.h"

namespace torch_pjrt::distributed {
namespace {

using backend::BufferPtr;

std::string message_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace

HostTransport::HostTransport(c10::intrusive_ptr<c10d::Backend> host, int rank, int size)
    : host_(std::move(host)), rank_(rank), size_(size) {}

HostTransport::~HostTransport() = default;

c10::intrusive_ptr<TpuWork> HostTransport::run(CollectiveCall& call, c10d::OpType type,
                                               std::chrono::milliseconds timeout) {
  auto job = std::make_shared<HostJob>();
  if (pipelines(call)) {
    std::vector<at::Tensor> results = build_pipeline(call, rank_, size_, host_, staging_, *job);
    return submit(call, job, results, type, timeout);
  }
  auto& client = backend::runtime().client();
  std::vector<pjrt::Event> reads;

  // Inputs first: their current buffers are what is sent, even when the
  // same tensor is about to receive the result.
  // Every host tensor of the call comes from the staging pool and goes back
  // to it once the call has finished well (after a failure gloo may still
  // hold it, so it is left to be freed).
  HostStaging* pool = &staging_;
  auto pooled = [&, pool](const at::Tensor& t) {
    at::Tensor host = pool->take(t.sizes(), t.scalar_type());
    job->pooled.push_back(host);
    return host;
  };
  auto stage_in = [&](const at::Tensor& t) {
    at::Tensor host = pooled(t);
    if (t.numel() > 0) {
      BufferPtr source = backend::read_tensor(t);
      reads.push_back(source->to_host_async(host.data_ptr(), host.nbytes()));
      job->sources.push_back(std::move(source));
    }
    return host;
  };
  auto host_like = [&](const at::Tensor& t) { return pooled(t); };
  std::vector<std::pair<at::Tensor, at::Tensor>> outputs;  // (device tensor, host result)
  auto stage_out = [&](const at::Tensor& t, const at::Tensor& host) { outputs.emplace_back(t, host); };

  const c10::intrusive_ptr<c10d::Backend> gloo = host_;
  std::vector<at::Tensor> in, out, results;
  std::function<Works()> op;
  std::function<void()> after;
  bool root = rank_ == call.root;
  int size = size_;
  hlo::Reduction reduction = call.reduction;
  double factor = call.premul_factor;
  auto premul = [reduction, factor](std::vector<at::Tensor>& ts) {
    for (auto& t : ts) premultiply(t, reduction, factor);
  };
  auto avg = [reduction, size](std::vector<at::Tensor> ts) {
    for (auto& t : ts) average(t, reduction, size);
  };

  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce: {
      for (const auto& t : call.inputs) in.push_back(stage_in(t));
      bool all = call.kind == CallKind::kAllReduce;
      int64_t r = call.root;
      op = [gloo, in, reduction, all, r, premul]() mutable {
        premul(in);
        Works works;
        for (auto& t : in) {
          std::vector<at::Tensor> one{t};
          if (all) {
            c10d::AllreduceOptions o;
            o.reduceOp = gloo_op(reduction);
            works.push_back(gloo->allreduce(one, o));
          } else {
            c10d::ReduceOptions o;
            o.reduceOp = gloo_op(reduction);
            o.rootRank = r;
            works.push_back(gloo->reduce(one, o));
          }
        }
        return works;
      };
      after = [in, avg] { avg(in); };
      if (all || root) {
        for (size_t i = 0; i < in.size(); ++i) stage_out(call.inputs[i], in[i]);
      }
      results = call.inputs;
      break;
    }
    case CallKind::kBroadcast: {
      for (const auto& t : call.inputs) in.push_back(root ? stage_in(t) : host_like(t));
      int64_t r = call.root;
      op = [gloo, in, r]() mutable {
        Works works;
        for (auto& t : in) {
          std::vector<at::Tensor> one{t};
          c10d::BroadcastOptions o;
          o.rootRank = r;
          works.push_back(gloo->broadcast(one, o));
        }
        return works;
      };
      if (!root) {
        for (size_t i = 0; i < in.size(); ++i) stage_out(call.inputs[i], in[i]);
      }
      results = call.inputs;
      break;
    }
    case CallKind::kAllGather:
    case CallKind::kReduceScatter: {
      bool gather = call.kind == CallKind::kAllGather;
      for (size_t i = 0; i < call.inputs.size(); ++i) {
        in.push_back(stage_in(call.inputs[i]));
        out.push_back(host_like(call.outputs[i]));
      }
      op = [gloo, in, out, gather, reduction, premul]() mutable {
        if (!gather) premul(in);
        Works works;
        for (size_t i = 0; i < in.size(); ++i) {
          at::Tensor o = out[i].view({-1}), x = in[i].view({-1});
          if (gather) {
            works.push_back(gloo->_allgather_base(o, x));
          } else {
            c10d::ReduceScatterOptions opts;
            opts.reduceOp = gloo_op(reduction);
            works.push_back(gloo->_reduce_scatter_base(o, x, opts));
          }
        }
        return works;
      };
      if (!gather) after = [out, avg] { avg(out); };
      for (size_t i = 0; i < out.size(); ++i) stage_out(call.outputs[i], out[i]);
      results = call.outputs;
      break;
    }
    case CallKind::kAllGatherList:
    case CallKind::kGather: {
      in.push_back(stage_in(call.inputs.at(0)));
      bool everyone = call.kind == CallKind::kAllGatherList;
      if (everyone || root) {
        for (const auto& t : call.outputs) out.push_back(host_like(t));
      }
      int64_t r = call.root;
      op = [gloo, in, out, everyone, r]() mutable {
        std::vector<std::vector<at::Tensor>> outs;
        if (!out.empty()) outs.push_back(out);
        if (everyone) return Works{gloo->allgather(outs, in)};
        c10d::GatherOptions o;
        o.rootRank = r;
        return Works{gloo->gather(outs, in, o)};
      };
      for (size_t i = 0; i < out.size(); ++i) stage_out(call.outputs[i], out[i]);
      results = out.empty() ? std::vector<at::Tensor>{} : call.outputs;
      break;
    }
    case CallKind::kReduceScatterList: {
      for (const auto& t : call.inputs) in.push_back(stage_in(t));
      out.push_back(host_like(call.outputs.at(0)));
      op = [gloo, in, out, reduction, premul]() mutable {
        premul(in);
        std::vector<std::vector<at::Tensor>> ins{in};
        c10d::ReduceScatterOptions o;
        o.reduceOp = gloo_op(reduction);
        return Works{gloo->reduce_scatter(out, ins, o)};
      };
      after = [out, avg] { avg(out); };
      stage_out(call.outputs[0], out[0]);
      results = call.outputs;
      break;
    }
    case CallKind::kAllToAll: {
      in.push_back(stage_in(call.inputs.at(0)));
      out.push_back(host_like(call.outputs.at(0)));
      std::vector<int64_t> out_splits = call.output_splits, in_splits = call.input_splits;
      op = [gloo, in, out, out_splits, in_splits]() mutable {
        c10d::AllToAllOptions o;
        return Works{gloo->alltoall_base(out[0], in[0], out_splits, in_splits, o)};
      };
      stage_out(call.outputs[0], out[0]);
      results = call.outputs;
      break;
    }
    case CallKind::kAllToAllList: {
      // gloo's list form needs equal sizes; one flat exchange with split
      // sizes serves any, and each output is a slice of its result.
      for (const auto& t : call.inputs) in.push_back(stage_in(t));
      std::vector<int64_t> in_splits, out_splits;
      for (const auto& t : call.inputs) in_splits.push_back(t.numel());
      for (const auto& t : call.outputs) out_splits.push_back(t.numel());
      int64_t total = 0;
      for (int64_t n : out_splits) total += n;
      at::Tensor received = at::empty({total}, call.outputs.at(0).options().device(at::kCPU));
      int64_t offset = 0;
      for (const auto& t : call.outputs) {
        out.push_back(received.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
      op = [gloo, in, received, out_splits, in_splits]() mutable {
        std::vector<at::Tensor> flats;
        for (const auto& t : in) flats.push_back(t.reshape({-1}));
        at::Tensor sent = at::cat(flats);
        c10d::AllToAllOptions o;
        return Works{gloo->alltoall_base(received, sent, out_splits, in_splits, o)};
      };
      for (size_t i = 0; i < out.size(); ++i) stage_out(call.outputs[i], out[i]);
      results = call.outputs;
      break;
    }
    case CallKind::kScatter: {
      if (root) {
        for (const auto& t : call.inputs) in.push_back(stage_in(t));
      }
      out.push_back(host_like(call.outputs.at(0)));
      int64_t r = call.root;
      op = [gloo, in, out, r]() mutable {
        std::vector<std::vector<at::Tensor>> ins;
        if (!in.empty()) ins.push_back(in);
        c10d::ScatterOptions o;
        o.rootRank = r;
        return Works{gloo->scatter(out, ins, o)};
      };
      stage_out(call.outputs[0], out[0]);
      results = call.outputs;
      break;
    }
    case CallKind::kSend: {
      in.push_back(stage_in(call.inputs.at(0)));
      int peer = static_cast<int>(call.root), tag = static_cast<int>(call.tag);
      op = [gloo, in, peer, tag]() mutable {
        return Works{gloo->send(in, peer, tag)};
      };
      break;
    }
    case CallKind::kRecv: {
      out.push_back(host_like(call.outputs.at(0)));
      int peer = static_cast<int>(call.root), tag = static_cast<int>(call.tag);
      op = [gloo, out, peer, tag]() mutable {
        return Works{gloo->recv(out, peer, tag)};
      };
      stage_out(call.outputs[0], out[0]);
      results = call.outputs;
      break;
    }
    case CallKind::kBarrier: {
      op = [gloo]() {
        return Works{gloo->barrier()};
      };
      break;
    }
  }

  // The results' device buffers take their place now; the workers fill them.
  HostPiece piece;
  piece.reads = std::move(reads);
  piece.start = op;
  piece.after = after;
  for (auto& [device_tensor, host] : outputs) {
    if (device_tensor.numel() == 0) continue;
    pjrt::PendingBuffer pending = pjrt::PendingBuffer::create(
        client, client->device(device_tensor.device().index()),
        ops::to_element_type(device_tensor.scalar_type()),
        std::vector<int64_t>(device_tensor.sizes().begin(), device_tensor.sizes().end()));
    backend::write_tensor(device_tensor, std::make_shared<pjrt::Buffer>(pending.take_buffer()));
    job->pending.push_back(std::move(pending));
    piece.fills.push_back({job->pending.size() - 1, host.data_ptr(),
                           0, static_cast<int64_t>(host.nbytes()), true});
  }
  job->pieces.push_back(std::move(piece));
  return submit(call, job, results, type, timeout);
}

c10::intrusive_ptr<TpuWork> HostTransport::submit(const CollectiveCall& call,
                                                  std::shared_ptr<HostJob> job,
                                                  std::vector<at::Tensor> results,
                                                  c10d::OpType type,
                                                  std::chrono::milliseconds timeout) {
  auto work = c10::make_intrusive<TpuWork>(rank_, type, call.label(), std::move(results), timeout);
  bool check = call.kind != CallKind::kSend && call.kind != CallKind::kRecv;
  CollectiveCall::Signature signature = call.signature();
  std::string where = "tpu backend (host transport, rank " + std::to_string(rank_) + " of " +
                      std::to_string(size_) + "): " + call.label();
  // The first error fails the Work and every result buffer; later pieces
  // of the call are skipped.
  auto fail = [job, work, where](const std::exception& e) {
    if (job->failed.exchange(true)) return;
    std::string message = where + " failed: " + message_of(e);
    for (auto& p : job->pending) {
      try {
        p.fail(pjrt::ErrorCode::kAborted, message);
      } catch (...) {
      }
    }
    work->fail(backend_error(message));
  };
  const c10::intrusive_ptr<c10d::Backend> gloo = host_;
  SerialQueue* finishing = &finishing_;
  HostStaging* pool = &staging_;
  int size = size_;
  if (job->pieces.empty()) {  // nothing to move (empty tensors)
    work->complete();
    return work;
  }
  starting_.push([job, work, gloo, check, signature, size, fail, finishing, pool]() {
    // Every rank's signature first, in a small all-gather: a mismatch is an
    // error on every rank. It must come before the data: gloo terminates
    // the process when a peer sends more bytes than it expects.
    if (check) {
      try {
        at::Tensor mine = at::tensor(std::vector<int64_t>(signature.begin(), signature.end()));
        std::vector<at::Tensor> theirs;
        for (int r = 0; r < size; ++r) theirs.push_back(at::empty_like(mine));
        std::vector<std::vector<at::Tensor>> gathered{theirs};
        std::vector<at::Tensor> input{mine};
        gloo->allgather(gathered, input)->wait();
        bool agree = true;
        for (const auto& t : theirs) agree = agree && at::equal(t, mine);
        if (!agree) {
          std::string why = "the ranks called different collectives:";
          for (int r = 0; r < size; ++r) {
            CollectiveCall::Signature s;
            for (size_t i = 0; i < s.size(); ++i) s[i] = theirs[r][i].item<int64_t>();
            why += " rank " + std::to_string(r) + " called " + describe_signature(s) + ";";
          }
          why.pop_back();
          throw std::runtime_error(why);
        }
      } catch (const std::exception& e) {
        finishing->push([fail, message = message_of(e)] { fail(std::runtime_error(message)); });
        return;
      }
    }
    for (size_t k = 0; k < job->pieces.size(); ++k) {
      Works works;
      try {
        if (job->failed) return;
        for (auto& e : job->pieces[k].reads) e.await("device-to-host copy");
        if (job->pieces[k].start) works = job->pieces[k].start();
      } catch (const std::exception& e) {
        finishing->push([fail, message = message_of(e)] { fail(std::runtime_error(message)); });
        return;
      }
      bool last = k + 1 == job->pieces.size();
      finishing->push([job, work, works, fail, pool, k, last]() {
        try {
          if (job->failed) return;
          for (const auto& w : works) w->wait();
          HostPiece& piece = job->pieces[k];
          if (piece.after) piece.after();
          for (const auto& f : piece.fills) {
            job->filling.push_back(job->pending[f.pending].fill_part(f.data, f.offset, f.size, f.last));
          }
          if (!last) return;
          for (auto& e : job->filling) e.await("host-to-device copy");
          work->complete();
          for (const auto& t : job->pooled) pool->give_back(t);
        } catch (const std::exception& e) {
          fail(e);
        }
      });
    }
  });
  return work;
}

}  // namespace torch_pjrt::distributed
