// The transport for a group whose ranks all live in this process (ranks as
// threads, one device each, one PJRT client): each collective is one XLA
// program compiled with the group's device assignment, cached like every
// other program, launched once for all devices by the last rank to arrive.
// Point-to-point sends hand the device buffer over and the receiver copies
// it to its device (no host round trip).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <utility>

#include "distributed/rendezvous.h"
#include "distributed/transport.h"

namespace torch_pjrt::distributed {

class XlaTransport : public Transport {
 public:
  XlaTransport(std::shared_ptr<Rendezvous> meeting, int rank, int size);
  const char* name() const override { return "xla"; }
  c10::intrusive_ptr<TpuWork> run(CollectiveCall& call, c10d::OpType type,
                                   std::chrono::milliseconds timeout) override;

 private:
  std::vector<at::Tensor> collective(CollectiveCall& call, std::chrono::milliseconds timeout);
  std::vector<at::Tensor> exchange_uneven(CollectiveCall& call, std::chrono::milliseconds timeout);
  void barrier(CollectiveCall& call, std::chrono::milliseconds timeout);
  void send(CollectiveCall& call);
  void recv(CollectiveCall& call, std::chrono::milliseconds timeout);
  Rendezvous::Outcome meet(const CollectiveCall& call, const std::string& suffix,
                           Rendezvous::Arrival mine, std::chrono::milliseconds timeout,
                           const Rendezvous::Action& action);

  std::shared_ptr<Rendezvous> meeting_;
  int rank_;
  int size_;
  // Matching sends and receives: the k-th send from a to b with a tag meets
  // b's k-th receive from a with that tag.
  std::map<std::pair<int64_t, int64_t>, uint64_t> sends_, recvs_;
};

}  // namespace torch_pjrt::distributed
