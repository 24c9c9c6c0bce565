// The planner's search space: which values of each knob it tries, and the plans they make for
// a model on a number of GPUs with a global batch. A point is one ParallelPlan; points that no
// schedule generator or plan check would accept are left out here, not evaluated.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/specs.h"
#include "schedules/lower.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::planner {

struct ScheduleChoice {
  std::string name;  // registered schedule
  int chunks = 0;    // stages per rank for interleaved schedules; 0 = none
  nlohmann::json params = nlohmann::json::object();  // its other parameters, e.g. {"waves": 2} (Hanayo)
};

struct PlanSpace {
  int gpus = 0;                    // GPUs every plan uses (dp * tp * pp), the cluster's first ones; 0 = all
  long global_batch = 0;           // sequences per iteration (dp * microbatch size * microbatches)
  std::vector<ScheduleChoice> schedules = {{"1f1b", 0}, {"interleaved-1f1b", 2}, {"interleaved-1f1b", 4}, {"zb-h1", 0}};
  std::vector<int> microbatch_sizes = {1, 2, 4, 8};  // b values tried
  std::vector<costmodel::RecomputePolicy> recompute = {costmodel::RecomputePolicy::None,
                                                       costmodel::RecomputePolicy::Selective,
                                                       costmodel::RecomputePolicy::Full};
  std::vector<int> zero = {0, 1};            // ZeRO stages tried where dp > 1 (3: FSDP, costmodel/fsdp.h)
  std::vector<int> shard_groups = {0};       // with zero 3: shard groups tried, 0 the whole dp group
                                             // (FSDP), else a size dividing dp and below it (HSDP)
  bool reshard_after_forward = true;         // with zero 3: gather each layer again for its backward
  std::vector<bool> sequence_parallel = {false, true};  // tried where tp > 1
  std::vector<schedules::TpOverlap> tp_overlap = {schedules::TpOverlap::Blocking};  // modes tried where tp > 1
  bool overlap_grad_reduce = true;           // every plan reduces its gradients in buckets during the backward
  bool overlap_param_gather = true;          // plans with a distributed optimizer gather parameters behind
                                             // the next forward (Megatron-Core --overlap-param-gather)
  double grad_bucket_bytes = 25.0 * 1024 * 1024;  // every plan's gradient bucket size (DDP's 25 MiB)
  schedules::GradReduceAt grad_reduce_at = schedules::GradReduceAt::Auto;  // every plan's, where it does
                                             // not overlap its reductions: rank end, stage end or auto
  bool preemptive_comm = false;              // every plan's pipeline transfers preempt its reductions (FOLD3D)
  std::string stack = "megatron-lm";         // the kernel set every plan runs on (costmodel/stack.h)
  std::vector<std::string> cuda_graph_scope; // what every plan runs as CUDA graphs (ParallelPlan::cuda_graph_scope)
  int max_tp = 0;                            // largest tp; 0 = the GPUs of one node (Megatron keeps tp in a node)
  std::vector<int> tp_degrees;               // tp values tried; empty = every divisor of gpus up to max_tp
  std::vector<int> pp_degrees;               // pp values tried; empty = every divisor (Oases runs pp = 1)
  std::vector<bool> fp8 = {false};           // precisions tried: the layers' linear products in 16 bits
                                             // (false) or in FP8 (true; a GPU with FP8, costmodel
                                             // check_fp8); a model with fp8 set is FP8 only
  std::vector<costmodel::Fp8Recipe> fp8_recipes = {costmodel::Fp8Recipe::Delayed};  // the recipes each FP8
                                             // precision is tried with (ModelSpec::fp8_recipe)
  std::vector<int> ep_degrees;               // expert-parallel degrees tried (costmodel/moe.h) where ep divides
                                             // the experts and dp x cp; empty = 1 for a dense model, every
                                             // power of two dividing the experts for a model with experts
  std::vector<int> expert_tp = {0};          // experts' tensor-parallel degrees tried where tp > 1: 0 (the
                                             // attention's tp), 1 (whole experts; ep from tp x dp x cp)
  std::vector<int> cp_degrees = {1};         // context-parallel degrees tried (costmodel/cp.h), where 2 cp
                                             // divides the sequence and the model's attention is fused
  std::vector<std::string> rank_orders = {"tp-dp-pp"};  // rank orders tried (fastest-varying axis first)
  bool for_runtime = false;                  // only plans `stagecraft train` runs (runtime/support/rules.h)
};

// Checks the space's own fields against the model and cluster; throws InputError naming the
// field, the value and what is allowed.
void check(const PlanSpace& space, const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c);
// The cluster the plans run on: the nodes of `c` that hold its first `space.gpus` GPUs (the last
// one partly used when gpus is not a multiple of a node).
costmodel::ClusterSpec plan_cluster(const costmodel::ClusterSpec& c, const PlanSpace& space);
// The expert-parallel degrees tried: space.ep_degrees, else 1 for a dense model and 1 with every
// power of two dividing a model's experts.
std::vector<int> expert_degrees(const PlanSpace& space, const costmodel::ModelSpec& m);
// Every point of the space, in a fixed order (tp, pp, cp, ep, b, schedule, recompute, sp, tp
// overlap, zero, shard group, rank order).
std::vector<costmodel::ParallelPlan> enumerate(const PlanSpace& space, const costmodel::ModelSpec& m,
                                               const costmodel::ClusterSpec& c);

}  // namespace stagecraft::planner
