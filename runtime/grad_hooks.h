// overlap_grad_reduce (plan.overlap_grad_reduce; PyTorch DDP's bucket hooks, Li et al. VLDB
// 2020; Megatron-LM's --overlap-grad-reduce): the buckets each stage's REDUCE_GRADs will cut
// (the cut replayed over the list), and a hook on each parameter that, during the stage's last
// backward, records its final gradient (what it held plus this backward's) and launches the
// bucket's all-reduce once the bucket is complete; the REDUCE_GRAD then skips it, and the step
// writes the reduced sum over .grad as for any bucket. Internal to the runtime.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "runtime/grad_buckets.h"

namespace stagecraft::runtime {

class GradHooks {
 public:
  // Starts a complete bucket's all-reduce (the gradient reduction's launch).
  using Launch = std::function<void(GradBucket bucket)>;
  GradHooks(const BucketCutter& cutter, Launch launch) : cutter_(cutter), launch_(std::move(launch)) {}
  GradHooks(const GradHooks&) = delete;  // the hooks hold `this`
  GradHooks& operator=(const GradHooks&) = delete;

  // Cuts the list's buckets and registers the hooks; only buckets reduced in a group of more
  // than one member (the others are only scaled, at the REDUCE_GRAD).
  void install(const std::vector<schedules::Action>& list);
  // Arms the hooks of the stage whose last backward (B, W or OVERLAP_F_B) or, with a split
  // backward, last I (where the parameters outside the deferred linears get their final
  // gradients) list position `span` is; disarm() after the action.
  void arm(const schedules::Action& a, size_t span);
  void disarm() { armed_stage_ = -1; }
  bool armed(int stage) const { return armed_stage_ == stage; }
  // In the stage's last W the weights' final gradients come from deferred jobs, outside
  // autograd: this reports them to the buckets as the tensor hooks report the others.
  WeightGradHook weight_hook(int stage);
  // At a REDUCE_GRAD: whether the bucket of `params` was launched by the hooks during the
  // backward (then the REDUCE_GRAD skips it); the bucket is reset for the next iteration.
  bool take_started(int stage, const std::vector<torch::Tensor>& params);

 private:
  struct HookBucket {
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> totals;  // each parameter's final gradient, once its hook fired
    int ready = 0;
    bool started = false;
    size_t span = 0;                    // the REDUCE_GRAD that reduces it (its trace span)
  };
  void on_grad(int stage, size_t b, size_t k, const torch::Tensor& g);
  void register_hooks();

  const BucketCutter& cutter_;
  Launch launch_;
  std::map<int, std::vector<HookBucket>> buckets_;  // stage -> its buckets, in reduction order
  std::map<int, size_t> last_backward_;             // stage -> list position of its last backward
  std::map<int, size_t> last_input_backward_;       // stage -> list position of its last I (split backward)
  std::map<const void*, std::pair<size_t, size_t>> slot_;  // parameter -> (bucket, index in it)
  int armed_stage_ = -1;                            // the stage whose last backward runs now
};

}  // namespace stagecraft::runtime
