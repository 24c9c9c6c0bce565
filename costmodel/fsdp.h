// Fully sharded data parallelism (ParallelPlan::zero = 3), as PyTorch's FSDP runs it (Zhao et al.,
// "PyTorch FSDP", VLDB 2023; torch.distributed.fsdp ShardingStrategy): every unit (here the
// embedding, each transformer layer and the head) keeps 1/S of its parameters, gradients and
// optimizer states on each of the S ranks of its shard group. Per microbatch:
// - forward: each unit's parameters are all-gathered before its compute, the next unit's gather
//   issued while the current unit computes (FSDP's forward prefetch, one unit ahead);
// - backward: with reshard_after_forward (FULL_SHARD, FSDP2's default) each unit is gathered
//   again, one unit ahead in reverse order; without it (SHARD_GRAD_OP) it stayed gathered;
// - each unit's gradients are reduce-scattered after its backward, behind the next unit's.
// So per unit and microbatch: 2 all-gathers and 1 reduce-scatter, or 1 and 1 without reshard.
// Hybrid sharding (HSDP, ShardingStrategy.HYBRID_SHARD): the shard group is shard_group
// consecutive dp ranks, and the dp / shard_group copies all-reduce their shards' gradients once
// per iteration. The gathers and reduce-scatters of a pass share one link, in issue order; a
// unit's compute waits for its gather, and the pass ends with its last reduce-scatter.
#pragma once

#include <functional>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {

// The ranks one parameter is sharded over: dp x cp for zero 1-3 (the gradients' group, with
// context parallelism too), or shard_group under HSDP; 1 without sharding. What divides the
// optimizer's states and its step.
int shard_degree(const ParallelPlan& p);

// One unit of one stage, per microbatch.
struct FsdpUnit {
  double compute_s = 0;  // its compute in the pass
  double gather_s = 0;   // all-gather of its parameters before it (0: none in this pass)
  double scatter_s = 0;  // reduce-scatter of its gradients after it (0: none in this pass)
};

// The duration of one pass over `units` in execution order: compute on one stream, the gathers
// (each issued when the unit before it starts, the first at once) and the reduce-scatters (each
// when its unit ends) in issue order on the other. Equals the sum of compute_s when every
// collective hides behind compute, except the first gather and the last reduce-scatter, which
// nothing hides.
double fsdp_pass_s(const std::vector<FsdpUnit>& units);

// What zero 3 adds to one stage, per microbatch (StageCost::fsdp).
struct FsdpStage {
  int units = 0;                   // embedding (first stage), layers, head (last stage)
  int gathers_f = 0;               // all-gathers in one F
  int gathers_b = 0;               // in one B (or I): units with reshard_after_forward, else 0
  int reduce_scatters = 0;         // in one B (or W)
  double gather_bytes = 0;         // per GPU, the parameters one F gathers, all units (16-bit)
  double scatter_bytes = 0;        // per GPU, the gradients one B reduce-scatters, all units
  double exposed_f_s = 0;          // what the collectives add to F (fsdp_pass_s - compute)
  double exposed_b_s = 0;          // to B
  double exposed_i_s = 0;          // to a split backward's I (gathers)
  double exposed_w_s = 0;          // to its W (reduce-scatters)
  double gathered_bytes = 0;       // per GPU, transient: two gathered units and two units' full
                                   // gradients in flight (prefetch), the largest units'
};

nlohmann::json to_json(const FsdpStage& f, int microbatches);  // with the per-iteration counts

// One unit's parameters and compute (per GPU, one microbatch), in forward order.
struct FsdpUnitWork {
  double params = 0;                     // its parameters on one tensor-parallel rank, unsharded
  double f_s = 0, b_s = 0, i_s = 0, w_s = 0;  // its share of the stage's F, B, I and W
  double fp8_params = 0;                 // of params, the matrices gathered in FP8 (ModelSpec::fp8:
                                         // the layers' linear weights; norms, biases, embedding
                                         // and head stay 16-bit)
};
// Seconds of one all-gather (or reduce-scatter) of a buffer of `bytes` on the shard group.
using CollectiveSeconds = std::function<double(double bytes)>;

// The stage's FSDP figures: gathers of params x bytes_per_param (the 16-bit compute copy,
// FSDP's param_dtype), reduce-scatters of params x grad_bytes_per_param (its reduce_dtype).
// FP8 (FP8 parameter all-gather: Megatron-Core --fp8-param-gather, torchao's float8 all-gather
// under FSDP2): the units' fp8_params gather 1 byte each, the rest 16 bits; a gathered unit holds
// its FP8 copies, `fp8_copy_bytes` per FP8 parameter (specs.h fp8_weight_copy_bytes: the weight
// and, on Hopper, the FP8 transpose its backward reads).
FsdpStage fsdp_stage(const std::vector<FsdpUnitWork>& units, const ModelSpec& m, bool reshard_after_forward,
                     const CollectiveSeconds& gather_s, const CollectiveSeconds& scatter_s, double fp8_copy_bytes = 2);

}  // namespace stagecraft::costmodel
