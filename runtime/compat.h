// The one place that knows LibTorch versions: 1.13 (Debian's libtorch-dev) and 2.x (inside
// a PyTorch wheel). Process groups, work handles and attention differ between them; the rest
// of the runtime uses only what is declared here.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/torch_pch.h"

namespace stagecraft::runtime::compat {

#if TORCH_VERSION_MAJOR >= 2
using CommBase = c10d::Backend;        // 2.x: Gloo and NCCL are backends of a ProcessGroup
#else
using CommBase = c10d::ProcessGroup;   // 1.13: ProcessGroupGloo is itself a ProcessGroup
#endif
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// A communicator over some of the world's ranks.
struct Group {
  std::string name;                  // e.g. "tp group of pp 1, dp 0" (for error messages)
  std::vector<int> members;          // global ranks, in group-rank order
  int rank = 0;                      // this process's rank in the group
  c10::intrusive_ptr<CommBase> pg;   // null when the group has one member
  int size() const { return static_cast<int>(members.size()); }
};

struct GroupOptions {
  std::string backend = "gloo";      // gloo, nccl or store (resolved; runtime/store_comm.h)
  std::string master_addr;           // used to pick the Gloo network device
  std::chrono::milliseconds timeout{60000};  // every blocking operation gives up after this
};

// Creates the group; the members meet through `store` under the key prefix `prefix`.
Group make_group(const StorePtr& store, const std::string& prefix, std::vector<int> members, int global_rank,
                 const GroupOptions& opt);

WorkPtr send(Group& g, torch::Tensor& t, int dst_global, int tag);  // asynchronous
WorkPtr recv(Group& g, torch::Tensor& t, int src_global, int tag);  // asynchronous
WorkPtr all_reduce_sum(Group& g, torch::Tensor& t);                 // asynchronous, in place
// One step's sends and receives as one group, as torch.distributed.batch_isend_irecv issues
// them (docs/runtime.md): on NCCL, c10d's coalescing (ncclGroupStart/ncclGroupEnd), so that two
// ranks sending to each other in the same step cannot deadlock; on Gloo and the store backend,
// whose sends do not wait for their receiver, the calls are no-ops and the same executor path
// runs. Inside a group
// send/recv may return a null handle (LibTorch 2.x NCCL); end_p2p then returns the handle that
// completes with the whole group (null where every call returned its own).
void begin_p2p(Group& g);
WorkPtr end_p2p(Group& g, std::vector<WorkPtr>& issued);  // issued: what send/recv returned inside
// Blocking all-reduce (sum) in place. Gloo in LibTorch 1.13 has no bf16 or fp16 sums: on Gloo
// such a tensor is summed as fp32 and rounded back (NCCL sums it as it is).
void all_reduce_sum_blocking(Group& g, torch::Tensor& t, std::chrono::milliseconds timeout);
// Whether all_reduce_sum_blocking would sum `t` as an fp32 copy (Gloo or the store backend, and
// a bf16 or fp16 `t`); an asynchronous caller then sums such a copy itself and rounds back after
// its wait.
bool all_reduce_widens(const Group& g, const torch::Tensor& t);
// Blocking all-reduce (max) in place of an fp32 tensor (vocabulary-parallel cross-entropy's
// row maxima).
void all_reduce_max_blocking(Group& g, torch::Tensor& t, std::chrono::milliseconds timeout);
// All-gather of every member's `in` (k elements) into `out` (n*k, member i's at i*k); blocking.
void all_gather(Group& g, const torch::Tensor& in, torch::Tensor& out, std::chrono::milliseconds timeout);
// The same, asynchronous: `out` holds the result once the returned work is waited for (empty
// work: done already, a group of one).
WorkPtr all_gather_async(Group& g, const torch::Tensor& in, torch::Tensor& out);
// Reduce-scatter (sum) of `in` (n*k elements) into `out` (k, this member's block); blocking.
// NCCL's own collective; on Gloo (LibTorch 1.13 has no Gloo reduce_scatter) a ring of n-1
// send/receive steps of k elements, the reduce-scatter half of a ring all-reduce.
void reduce_scatter_sum(Group& g, const torch::Tensor& in, torch::Tensor& out, std::chrono::milliseconds timeout);
void wait(const WorkPtr& w, std::chrono::milliseconds timeout);
// All-to-all of rows (the first dimension), blocking: rows [sum(send[:r]), +send[r]) of `in`
// go to member r, and `out` (sum(recv) rows) receives member r's at sum(recv[:r]); the other
// dimensions equal. c10d's alltoall_base with split sizes (Gloo, NCCL and the store backend have
// it). On Gloo and the store backend a bf16 or fp16 tensor travels as an fp32 copy (as
// all_reduce_sum_blocking does).
void all_to_all_rows(Group& g, const torch::Tensor& in, torch::Tensor& out, const std::vector<std::int64_t>& send,
                     const std::vector<std::int64_t>& recv, std::chrono::milliseconds timeout);

// Causal multi-head attention on (b, heads, s, d) tensors. `fused`: one kernel
// (scaled_dot_product_attention, LibTorch 2.x: flash or memory-efficient attention, keeping no
// s x s tensor); else scores and softmax as tensors (the core Korthikanti et al. count).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool fused);
// Whether this build has the fused kernel (LibTorch 2.x).
bool fused_attention_available();

// The values of --backend, for help texts and error messages.
constexpr const char* kBackendChoices = "auto, gloo, nccl, store";

// Whether this LibTorch build has Gloo (not a PyTorch wheel: runtime/torch_pch.h) and NCCL, and
// how many CUDA devices the machine shows.
bool gloo_compiled();
bool nccl_compiled();
int cuda_devices();

}  // namespace stagecraft::runtime::compat
