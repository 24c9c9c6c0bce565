// The work of one plan as one object, built once from (model, plan, cluster topology) and then
// priced (costs.h analytic_cost_table = price(build_plan_workload(...))): for every stage of the
// lowered schedule, its layers (dense and MoE), one sub-batch's layer and head work on one
// tensor-parallel rank (workload.h LayerWork: every product with its shape, the attention core,
// the memory-bound bytes, per pass), the bytes it sends, its tensor-parallel collectives, its
// MoE layers' dispatch and combine, the parameters and gradients it holds and reduces, and the
// activations it keeps. Every byte any engine prices comes from here; the pricer turns bytes into
// seconds on the cluster's links and work into seconds on its GPUs. `estimate --json` prints it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/costs.h"
#include "costmodel/cp.h"
#include "costmodel/moe.h"
#include "costmodel/specs.h"
#include "costmodel/workload.h"
#include "schedules/schedule.h"

namespace stagecraft::costmodel {

// One stage of the schedule: what one microbatch of it computes, moves and keeps.
struct StageWorkload {
  int stage = 0;             // index in the schedule
  int part = 0;              // model part (stage within a chain) it computes
  int first_layer = 0;       // the part's first transformer layer in the model
  int layers = 0;            // transformer layers of the part
  int dense_layers = 0;      // of them, with a dense MLP
  int moe_layers = 0;        // of them, with experts (ModelSpec::num_experts)
  int mtp_layers = 0;        // of them, multi-token prediction modules' (ModelSpec::mtp_layers; the
                             // last stage's, or the layout's stage: pipeline_split.h mtp_model_part)
  int head_passes = 0;       // output heads (logits and loss) a microbatch: 1 on the last stage, plus
                             // one per multi-token prediction module on their stage
  bool first = false;        // holds the embedding
  bool last = false;         // holds the head and the loss
  bool head = false;         // holds an output head (head_passes > 0): the last stage, the modules' stage
  schedules::TpOverlap mode = schedules::TpOverlap::Blocking;  // the part's tp overlap mode
  int sub_batches = 1;       // sub-batches a microbatch is split in by that mode
  int sub_batch_samples = 1; // bb: samples of one sub-batch
  LayerWork layer;           // one sub-batch's layer and head on one tp rank (analytic pricing)
  double tp_collective_bytes = 0;  // (bb, s/cp, h) one tp collective's buffer; 0 at tp 1
  int tp_collectives_per_pass = 0; // of them in one F (and one I), every sub-batch: 2 per layer
  double boundary_bytes = 0; // (b, s/cp, h[/t with sp]) the activation sent on (its gradient back)
  MoeDispatchWork moe;       // one MoE layer's dispatch and combine, one sub-batch (moe.h)
  CpRingWork cp_ring;        // one layer's key/value ring, one sub-batch (cp.h); none at cp 1
  double params = 0;         // one GPU's parameters of the stage, its ends' and routed experts' included
  double expert_params = 0;  // of them, the routed experts' (sharded over the expert-dp group)
  double linear_params = 0;  // the linear weights with an FP8 copy (ModelSpec::fp8; else 0)
  double grad_bytes = 0;     // params x grad bytes: what the stage reduces
  double expert_grad_bytes = 0;  // of them, the routed experts' (over the expert-dp groups)
  // Activations per microbatch, from the formulas (memory.h; a profile's measured bytes replace
  // them when priced): kept without recomputation, kept under full recomputation, the backward's
  // working set, and what a split backward's I leaves for its W.
  double act_bytes = 0;
  double ckpt_bytes = 0;
  double work_bytes = 0;
  double w_kept_bytes = -1;
  // Activation offloading (plan.offload_layers): of act_bytes, what the offloaded layers keep in
  // host memory instead (not counted in act_bytes), moved out in each forward and back in each
  // backward over the host link.
  int offloaded_layers = 0;        // min(plan.offload_layers, layers)
  double offloaded_bytes = 0;      // per microbatch, each way
};

struct PlanWorkload {
  ModelSpec model;           // as given
  ModelSpec rank_model;      // the tokens one rank holds: s / cp per sample (cp.h)
  ParallelPlan plan;
  bool fp8_any_layout = false;  // the GPU's FP8 products read any layout (ClusterSpec::fp8_gemm_any_layout)
  std::vector<StageWorkload> stages;  // (num_stages)
};

// The one builder. Checks the plan against the model and cluster (check_fit) and the schedule
// against the plan; throws InputError naming the field otherwise.
PlanWorkload build_plan_workload(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p,
                                 const schedules::Schedule& s);

// Prices a workload into the engines' cost table: compute by shape (or the profile's measured
// layers), collectives on the cluster's links (measured ones where the profile has them),
// memory from the workload's bytes (measured ones where profiled).
CostTable price(const PlanWorkload& w, const ClusterSpec& c, const schedules::Schedule& s, const Profile* profile);

nlohmann::json to_json(const PlanWorkload& w);

}  // namespace stagecraft::costmodel
