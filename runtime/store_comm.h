// The `store` backend (issue 37): ranks exchange tensors through the job's c10d store (the
// TCPStore of rank 0) instead of Gloo or NCCL. Every message is a key in the store holding a
// contiguous host copy of the tensor, so it works for tensors on any device and for several ranks
// sharing one GPU (which NCCL refuses, and a PyTorch wheel has no Gloo headers for); it is slow,
// for tests and for running the CUDA paths of multi-rank training on a machine with one GPU
// (docs/runtime.md "The store backend").
//
// What compat.cpp calls on a group's backend: send and recv (matched in order per peer and tag,
// as c10d does), all-reduce (sum and max), all-gather and all-to-all with split sizes.
// Collectives run in issue order on a thread of the group, as Gloo's do, so that an asynchronous
// all-reduce never waits inside the caller for members that first need this rank's later sends.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/compat.h"

namespace stagecraft::runtime {

class StoreComm : public compat::CommBase {
 public:
  // `store`: the group's own view of the job's store (a PrefixStore: keys of different groups
  // cannot meet); `timeout`: how long a message or a member may keep this rank waiting; `name`:
  // the group in error messages.
  StoreComm(compat::StorePtr store, int rank, int size, std::chrono::milliseconds timeout, std::string name = "store group");
  ~StoreComm() override;
  StoreComm(const StoreComm&) = delete;
  StoreComm& operator=(const StoreComm&) = delete;

  const std::string getBackendName() const override { return "store"; }

  // Complete on return: the tensor's bytes are in the store.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  // Posting never blocks; the returned work's wait() fetches the message (a rank posts its
  // receives before its sends, so two ranks receiving from each other first must not deadlock).
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  // SUM or MAX in place. Every member adds the members' values in group-rank order on the host,
  // so all get bit-identical results; bf16 and fp16 are summed in fp32 and rounded once.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  // out[0][r] receives member r's in[0].
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // Rows (the first dimension) of `in`, in_splits[r] of them to member r; out_splits[r] rows of
  // `out` from member r. Empty splits: equal shares.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;

 private:
  using Clock = std::chrono::steady_clock;

  int me() const { return getRank(); }
  int members() const { return getSize(); }
  void check_peer(int peer, const char* op) const;
  std::int64_t next_message(std::map<std::pair<int, int>, std::int64_t>& counters, int peer, int tag);
  // Queues `body(seq)` behind the collectives issued before it; the work completes when it ran.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const std::string& what, std::function<void(std::int64_t)> body);
  void worker_loop();
  // Waits for `key` (polling: a blocking store wait would hold the store's client for other
  // threads of this rank) and returns its bytes; Error naming `what` after the timeout.
  std::vector<std::uint8_t> fetch(const std::string& key, const std::string& what);
  // Publishes this member's value of collective `seq`, and returns every member's (host, 1-D).
  std::vector<at::Tensor> exchange(std::int64_t seq, const at::Tensor& host, const std::string& what);
  void run_allreduce(std::int64_t seq, at::Tensor t, c10d::ReduceOp::RedOpType op);
  void run_allgather(std::int64_t seq, std::vector<at::Tensor> out, at::Tensor in);
  void run_alltoall(std::int64_t seq, at::Tensor out, at::Tensor in, std::vector<int64_t> out_rows, std::vector<int64_t> in_rows);

  compat::StorePtr store_;
  std::chrono::milliseconds timeout_;
  std::string name_;

  std::mutex counters_mu_;  // send and recv may be called from several threads of this rank
  std::map<std::pair<int, int>, std::int64_t> sent_, received_;  // (peer, tag) -> messages so far

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::function<void()>> queue_;  // collectives not yet run, in issue order
  std::int64_t next_seq_ = 0;                // the next collective's number (equal on every member)
  std::thread worker_;                       // started by the first collective
  std::atomic<bool> stopping_{false};
  std::string previous_key_;  // this member's key of its last all-reduce or all-gather (worker only)
};

}  // namespace stagecraft::runtime
