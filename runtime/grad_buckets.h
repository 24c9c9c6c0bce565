// How the executor cuts a stage's gradients into reduction buckets and where each bucket is
// reduced (runtime/grad_reduction.h): a REDUCE_GRAD of fraction f reduces the stage's next f of
// its parameters (parameter granularity, in the part's order), in buckets of about
// ExecConfig::bucket_bytes (PyTorch DDP's buckets, Li et al. VLDB 2020); a bucket never mixes
// routed experts with the rest (they reduce in another group) nor, with zero 3, two FSDP units.
// Internal to the runtime.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/exec_common.h"
#include "runtime/executor.h"
#include "runtime/preempt.h"

namespace stagecraft::runtime {

// One stage's parameters to reduce, by bucket.
using GradShare = std::vector<std::vector<torch::Tensor>>;

// Where each stage's REDUCE_GRADs have got to.
struct ShareCursor {
  std::map<int, size_t> next;   // stage -> next parameter to reduce
  std::map<int, double> share;  // stage -> fraction reduced so far
};

// One in-flight gradient all-reduce (with zero: a pending reduce-scatter).
struct GradBucket {
  compat::WorkPtr work;
  std::shared_ptr<PreemptiveReducer::Job> job;  // preemptive_comm: the chunked all-reduce instead of work
  torch::Tensor flat;                           // (n) concatenated gradients
  std::vector<torch::Tensor> params;
  compat::Group* group = nullptr;               // dp group, or the group of the part's copies
  size_t span = 0;                              // the REDUCE_GRAD's span, closed when waited
  int stage = -1;                               // whose parameters
};

class BucketCutter {
 public:
  BucketCutter(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts) : cfg_(cfg), parts_(parts) {}

  // The parameters of the stage's next `a.fraction` share, cut into buckets; advances `cursor`.
  GradShare cut(const schedules::Action& a, ShareCursor& cursor) const;
  bool is_expert(const torch::Tensor& p) const { return cfg_.expert_params.count(p.unsafeGetTensorImpl()) > 0; }
  // The group a bucket of `params` (one kind: cut) is reduced in.
  compat::Group& group_of(int stage, const std::vector<torch::Tensor>& params) const;
  // The group each bucket is cut over: dp, or with hybrid sharding its shard group.
  compat::Group& shard_group() const { return cfg_.shard ? *cfg_.shard : *cfg_.dp; }
  // This member's chunk (offset, length) of a bucket of n elements: the bucket padded to a
  // multiple of the shard group's size (dp), cut into as many equal chunks (Megatron's
  // distributed optimizer shards each bucket so).
  std::pair<int64_t, int64_t> chunk_of(int64_t n) const;

 private:
  const ExecConfig& cfg_;
  const std::map<int, ModelPart*>& parts_;
};

}  // namespace stagecraft::runtime
