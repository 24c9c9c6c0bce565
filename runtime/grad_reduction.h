// The executor's gradient reduction (runtime/executor.h; docs/ir.md REDUCE_GRAD and OPTIMIZER):
// each REDUCE_GRAD cuts the stage's next share of gradients into buckets (grad_buckets.h) and
// starts their asynchronous all-reduces over dp, or over the copies of a part in several chains,
// or the routed experts' over the expert-data-parallel group; overlap_grad_reduce starts them
// from gradient hooks during the last backward (grad_hooks.h), preemptive_comm chunks them
// behind this rank's sends (runtime/preempt.h), zero reduce-scatters them instead and gathers the
// parameters after the step (zero_shards.h). FOLD3D's deferred shares reduce the previous
// iteration's gradients before the stage's first compute. OPTIMIZER waits for all, then steps.
// Internal to the runtime.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "runtime/grad_hooks.h"
#include "runtime/zero_shards.h"

namespace stagecraft::runtime {

class GradReduction {
 public:
  // Shards the optimizer (zero with dp > 1), installs the hooks (overlap_grad_reduce) and starts
  // the preemptive reducer (preemptive_comm with dp > 1), as `cfg` asks; the support rules are
  // the executor's to assert before (runtime/support/rules.h).
  GradReduction(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts, AdamW* opt,
                const std::vector<schedules::Action>& list, ExecAccounting& acc);
  GradReduction(const GradReduction&) = delete;
  GradReduction& operator=(const GradReduction&) = delete;

  void reduce_grad(const schedules::Action& a, size_t span);  // REDUCE_GRAD at list position `span`
  // Before a compute action of `stage`: the deferred share it waits for, applied (FOLD3D), and
  // its parameters' all-gathers left in flight by the last step (overlap_param_gather).
  void finish_late(int stage);
  void finish_gathers(int stage) { zero_.finish_gathers(stage); }
  // OPTIMIZER, around the wait for the sends (the caller's, in between): first every reduction
  // in flight finished, then the step; returns the squared gradients' sum (fp64, on the device).
  void finish_for_step();
  torch::Tensor step();
  // After the last step: the gathers in flight finished and the deferred shares applied.
  void flush();
  void track_send(const compat::WorkPtr& send);  // preemptive_comm: a send its chunks yield to
  void count_preemption(StepRecord& rec);        // the reducer's counters of this step
  GradHooks& hooks() { return hooks_; }
  ShardedParams* fsdp() const { return zero_.fsdp(); }

 private:
  struct LateShare {                        // a skipped share whose reduction is in flight
    std::vector<GradBucket> buckets;        // its all-reduces (none with one dp member)
    std::vector<torch::Tensor> params;      // the parameters the update waits for
  };
  void reduce_deferred(int stage, const GradShare& share, size_t span);
  void apply_late(int stage, const GradShare& share, size_t span);
  void launch(compat::Group& g, GradBucket& b);
  void start_bucket(const std::vector<torch::Tensor>& params, size_t span, int stage, std::vector<GradBucket>& into);
  void finish_reductions(std::vector<GradBucket>& list);
  void wait_all_reduce(GradBucket& b);
  std::vector<torch::Tensor> hold_deferred();
  torch::Tensor squared_gradients() const;

  const ExecConfig& cfg_;
  const std::map<int, ModelPart*>& parts_;
  AdamW* opt_;
  ExecAccounting& acc_;
  BucketCutter cutter_;
  ZeroShards zero_;
  GradHooks hooks_;
  std::vector<GradBucket> buckets_;             // this iteration's reductions in flight
  std::unique_ptr<PreemptiveReducer> reducer_;  // preemptive_comm with dp > 1
  PreemptStats reducer_seen_;                   // its counters at the start of the step
  ShareCursor cursor_;                          // this iteration's REDUCE_GRADs so far
  // Deferred reductions (REDUCE_GRAD before the stage's first compute action).
  std::set<size_t> deferred_reduce_;                 // positions of those REDUCE_GRADs in the list
  std::vector<std::pair<int, GradShare>> held_;      // (stage, share) this iteration's OPTIMIZER skips
  std::vector<std::pair<int, GradShare>> late_;      // what the last OPTIMIZER skipped, in list order
  std::set<int> late_stages_;                        // stages whose skipped share is not yet applied
  std::map<int, LateShare> awaiting_;                // stage -> launched, applied at its next compute
};

}  // namespace stagecraft::runtime
