// The distributed optimizer's side of the executor's gradient reduction (plan.zero >= 1; runtime/
// grad_reduction.h): each bucket's gradients reduce-scattered over the shard group (dp, or with
// hybrid sharding its shard group, then all-reduced over the replicas), AdamW updating this
// member's chunk of each bucket (Megatron-LM's distributed optimizer), the updated chunks
// all-gathered after the step, at once or, with overlap_param_gather, each stage's at its next
// compute. zero 3 also shards the parameters themselves (runtime/fsdp.h: units gathered around
// their passes). Internal to the runtime.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "runtime/exec_accounting.h"
#include "runtime/fsdp.h"
#include "runtime/grad_buckets.h"

namespace stagecraft::runtime {

class ZeroShards {
 public:
  ZeroShards(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts, AdamW* opt, const BucketCutter& cutter,
             ExecAccounting& acc)
      : cfg_(cfg), parts_(parts), opt_(opt), cutter_(cutter), acc_(acc) {}
  ~ZeroShards();  // unregisters the sharded parameters (fsdp_params)
  ZeroShards(const ZeroShards&) = delete;
  ZeroShards& operator=(const ZeroShards&) = delete;

  // The buckets every step reduces (the list's REDUCE_GRADs cut as the step will cut them) and
  // this member's chunk of each, for the optimizer's shards; zero 3: the parameters sharded too.
  void shard(const std::vector<schedules::Action>& list);
  // Reduce-scatters the bucket (timed as a wait, its span closed), keeps it for the gather.
  void reduce_scatter(GradBucket& b);
  // After the step: every member's updated chunk of every kept bucket to every member, one
  // asynchronous all-gather per bucket; without overlap_param_gather all finished at once.
  void gather_parameters();
  // Waits for the parameter all-gathers of `stage` (-1: all) and writes them into the
  // parameters; the time waited counts as waiting inside the action that needed them.
  void finish_gathers(int stage);
  // zero 3's step: counted once over `later` and every parameter, applied unit by unit to the
  // chunks; the unsharded gradients then released until the next backward.
  void step_units(std::vector<torch::Tensor> later);
  bool sharded() const { return !shards_.empty(); }
  // Sum of the squared reduced gradients of this member's chunks, over the shard group (each chunk once).
  torch::Tensor squared_gradients() const;
  ShardedParams* fsdp() const { return fsdp_.get(); }  // zero 3 with dp > 1 (null otherwise)

 private:
  struct Gather {             // one bucket's parameter all-gather after the step
    compat::WorkPtr work;     // empty: finished
    torch::Tensor out;        // (dp * chunk) every member's updated chunk
    std::vector<torch::Tensor> params;
    compat::Group* group = nullptr;
    int stage = -1;
  };
  void reduce_scatter_bucket(GradBucket& b);
  Gather start_gather(const GradBucket& b);
  const std::string& name_of(int stage, const torch::Tensor& p) const;

  const ExecConfig& cfg_;
  const std::map<int, ModelPart*>& parts_;
  AdamW* opt_;
  const BucketCutter& cutter_;
  ExecAccounting& acc_;
  std::vector<GradBucket> gathers_;     // reduced buckets whose parameters the step all-gathers
  std::vector<Gather> in_flight_;       // their all-gathers, until each stage's next compute
  std::vector<AdamW::Owned> shards_;    // the elements this member reduces and updates
  std::unique_ptr<ShardedParams> fsdp_; // zero 3 with dp > 1: the parameters themselves sharded
};

}  // namespace stagecraft::runtime
