// Per-action costs the evaluator (and later the simulator) consumes: for each stage, the
// duration of each op for one microbatch, the transfer times at its boundaries, its gradient
// reduction, offload and memory figures; per rank, the optimizer step and static memory.
// Built from the analytic model (model, cluster, plan) or from unit costs for schedule studies.
#pragma once

#include <string>
#include <vector>

#include "costmodel/cp.h"
#include "costmodel/fsdp.h"
#include "costmodel/inner.h"
#include "costmodel/moe.h"
#include "costmodel/specs.h"
#include "costmodel/topology.h"
#include "schedules/memory_events.h"
#include "schedules/schedule.h"

namespace stagecraft::costmodel {

struct Profile;  // profile.h: measured layers and collectives

// One pass's seconds by kind (analytic pricing, price.h BlockKinds): the matrix products outside
// the attention core, the attention core (its products or fused kernel and its score traffic),
// the memory-bound kernels, and the communication the pass waits for inside it (exposed tensor-
// parallel collectives, the cp ring's exposed steps, the experts' all-to-alls). They add up to
// the pass's duration; all 0 when the costs are profiled or unit costs.
struct PassKinds {
  double products_s = 0;
  double attention_core_s = 0;
  double memory_s = 0;
  double comm_s = 0;
  double host_s = 0;  // the GPU waiting for the host to issue kernels (host.h)
  double total_s() const { return products_s + attention_core_s + memory_s + comm_s + host_s; }
};

struct StageCost {        // one stage, one microbatch
  double f_s = 0;         // forward
  double b_s = 0;         // full backward
  double i_s = 0;         // backward for inputs
  double w_s = 0;         // backward for weights
  double r_s = 0;         // recompute of all the stage's layers (an R with fraction x: x * r_s)
  double send_f_s = 0;    // forward output to the next stage (0 when on the same rank)
  double send_b_s = 0;    // input gradient to the previous stage (0 when on the same rank)
  double send_f_bytes = 0;  // per GPU, what send_f_s moves (0 when on the same rank)
  double send_b_bytes = 0;  // per GPU, what send_b_s moves
  double reduce_grad_s = 0;  // data-parallel all-reduce of all the stage's gradients
  double reduce_grad_latency_s = 0;  // its latency terms alone: what a bucket (a share of it) pays whole
  double grad_bytes = 0;     // (params of the stage on one GPU) x grad_bytes_per_param: what it reduces
  double offload_s = 0;   // all activations of one microbatch (act_bytes) to host memory; a
                          // recomputed (stage, microbatch) moves only what F kept, in proportion
  double reload_s = 0;    // and back
  double act_bytes = 0;   // activations F keeps for the backward, no recomputation
  double ckpt_bytes = 0;  // what F keeps when the stage is fully recomputed (layer inputs)
  double work_bytes = 0;  // transient working memory of one B (or I) of the stage, above what
                          // the forwards keep: its layers' backward working set, the head's on
                          // the last stage (memory::layer_backward_working_bytes, or profiled)
  double w_kept_bytes = -1;  // what a split backward's I leaves for its W (the linears' inputs
                             // and output gradients; memory::layer_weight_kept_bytes, or
                             // profiled); < 0: not modelled, W frees everything
  // Tensor-parallel all-reduces folded into the durations above (Megatron: two per layer in F
  // and R, two in I and B); engines that simulate them explicitly subtract these. The
  // vocabulary-parallel ends' collectives (embedding, loss) are priced inside the end pieces'
  // compute instead (costs.cpp), not counted here.
  int tp_allreduces_f = 0;        // all-reduces inside one F (and one full R)
  int tp_allreduces_i = 0;        // all-reduces inside one I (and one B)
  double tp_allreduce_bytes = 0;  // size of each: sbh activations, (b, s, h)
  double tp_comm_f_s = 0;         // time of F's all-reduces included in f_s (and r_s)
  double tp_comm_i_s = 0;         // time of I's all-reduces included in i_s (and b_s)
  // flow_scale of the stage's sends, of its dense gradient reduction and of one tp collective (1
  // without a profile): the simulator sizes those flows by them (sim/workload.h), so that a
  // measured collective takes its measured time on an idle link there too.
  double send_f_scale = 1, send_b_scale = 1, reduce_grad_scale = 1, tp_scale = 1;
  double weight = 1;      // share of a rank's layers, L_stage / (L / p): "microbatches held" unit
  int layers = 0;         // transformer layers in the stage (0 with unit costs)
  // The pieces f_s .. r_s were evaluated from (inner.h): per-block compute and per-collective
  // times of one sub-batch, and the stage's tp overlap mode. layers = 0 with unit costs.
  // tp_allreduces_* and tp_comm_*_s above count every collective of every sub-batch.
  InnerCosts inner;
  double tp_exposed_f_s = 0;      // collective time F does not hide (= tp_comm_f_s when blocking)
  double tp_exposed_b_s = 0;      // the same for B
  CpLayer cp;                     // cp > 1: one layer's ring of key/value chunks, per sub-batch (its
                                  // exposed time already in the attention pieces of `inner`)
  MoeStage moe;                   // experts: its MoE layers' all-to-alls and tp collectives per
                                  // microbatch (already in f_s, b_s, i_s and r_s) and expert parameters
  double overlap_b_s = -1;        // the backward half of an OVERLAP_F_B (DualPipe's overlapped pair): what
  double overlap_i_s = -1;        // B (or I) adds to the forward beside it (set_overlapped_pair); < 0: b_s, i_s
  double expert_grad_bytes = 0;   // of grad_bytes, the routed experts': reduced over the expert-data-
                                  // parallel group (moe.h) instead of dp x cp
  FsdpStage fsdp;                 // zero 3: its collectives per microbatch, already in f_s, b_s, i_s
                                  // and w_s (exposed_*), and its gathered units (in work_bytes)
  double host_wait_f_s = 0;       // of f_s (every sub-batch, every layer): the GPU waiting for the
  double host_wait_b_s = 0;       // host to issue kernels (host.h); of b_s the same
  PassKinds kinds_f;              // f_s by kind (analytic costs; else zeros)
  PassKinds kinds_b;              // b_s by kind
};

struct CostTable {
  std::vector<StageCost> stages;      // (num_stages)
  std::vector<double> optimizer_s;    // (num_ranks) optimizer step of each pipeline rank
  std::vector<double> param_gather_s; // (num_ranks) all-gather of the updated parameters over the dp
                                      // group after the step (distributed optimizer; else 0 or empty)
  std::vector<double> param_gather_head_share;  // (num_ranks) share of the gather the next forward waits
                                      // for before it starts: its first bucket with
                                      // plan.overlap_param_gather, else 1 (or empty: 1)
  std::vector<double> param_gather_bytes;  // (num_ranks) per GPU, the buffer all-gathered (16-bit weights)
  std::vector<double> static_bytes;   // (num_ranks) weights, gradients, optimizer states
  std::vector<double> params;         // (num_ranks) parameters held by one GPU of the rank
  std::vector<double> expert_params;  // (num_ranks) of them, routed experts' (sharded over the expert-
                                      // data-parallel group by a distributed optimizer; else 0 or empty)
  std::vector<double> fp8_params;     // (num_ranks) of them, the linear weights with FP8 copies
                                      // (ModelSpec::fp8; else 0 or empty)
  std::vector<std::string> notes;     // where measured costs were interpolated or extrapolated
};

// Durations of one stage and one microbatch; comm, reductions and memory zero.
struct UnitCosts {
  double f = 1, b = 2, i = 1, w = 1, r = 1;
};
// Parses "F=1,B=2,I=1,W=1,R=1" (any subset; keys case-insensitive); throws InputError.
UnitCosts parse_unit_costs(const std::string& text);
CostTable unit_cost_table(const schedules::Schedule& s, const UnitCosts& u);

// Layers of each model part (stage within a chain): Megatron-Core's layout or its split with the
// embedding and loss counted (pipeline_split.h; the first and last stage may then hold none),
// plan.stage_layers if given, else as even as possible with the remainder on the middle stages
// (first and last also carry the embedding and head). Throws InputError when there are fewer
// layers than stages.
std::vector<int> partition_layers(const ModelSpec& m, const ParallelPlan& p, int stages_per_chain);
// With several chains (Chimera) a stage's gradients are reduced with its copies' in one ring
// over dp x chains ranks, whose slowest hop is the slower of the dp link and the link between
// the copies' ranks (Chimera Sec. 3.4); with one chain, the dp link.
Link chain_reduce_link(const schedules::Schedule& s, int stage, const Topology& topo, const Link& dp_link);

// Activation memory of one (stage, microbatch) at each of its events, one rule for the
// evaluator and the simulator. F keeps (1-f) act + f ckpt (f: its recompute fraction). An R
// restores what it recomputes before its B: all of it, f (act - ckpt), where it runs apart
// from its B (Merak's early recomputation, waiting for the gradient with the stage's
// activations back); one layer's worth where it is fused with its B (the next action on the
// rank, sends aside, is that B: Megatron-LM recomputes inside the backward one layer at a
// time, holding the checkpoints and one layer's activations; Korthikanti et al. MLSys 2023
// Sec. 5). B (or W) frees what the pair held. Recomputation is by whole layers (Megatron-LM's
// --recompute-num-layers, the runtime's): f counts as schedules::recomputed_layers(f, layers) /
// layers of the stage. Fused: schedules::recompute_fused_with_backward.
double recomputed_layer_share(const StageCost& sc, double f);
double kept_activation_bytes(const StageCost& sc, double f);
double recompute_activation_bytes(const StageCost& sc, double f, bool fused);
double backward_freed_bytes(const StageCost& sc, double f, bool fused);
// A split backward: I frees what only the input gradient read (act_bytes - w_kept_bytes; below
// zero where the output gradients it keeps outweigh that), W the rest (w_kept_bytes). Where
// w_kept_bytes is not modelled, I frees nothing and W everything.
double split_input_freed_bytes(const StageCost& sc);
double split_weight_freed_bytes(const StageCost& sc);

// What one transformer layer keeps per sub-batch of `b` samples at tensor-parallel degree `t`
// (Korthikanti et al., MLSys 2023, memory.h): act_bytes without recomputation (the selective
// formula when `selective`), ckpt_bytes under full recomputation: the layer's input, and with
// Oases' fine-grained recomputation (t > 1) each block's input too, the output of the
// collective before it (Oases Sec. 4). The one rule for the cost table and the planner.
struct LayerSavedBytes {
  double act_bytes = 0;   // (b, s, h) activations the layer's backward reads
  double ckpt_bytes = 0;  // (b, s, h) inputs kept per layer under full recomputation
};
int checkpoints_per_layer(schedules::TpOverlap mode, int t);
// `modules`: selective recomputation's modules beyond the core, their bytes not kept
// (memory::recomputed_module_bytes).
LayerSavedBytes layer_saved_bytes(const ModelSpec& m, int b, int t, bool sp, bool selective, schedules::TpOverlap mode,
                                  int moe_tp = 0, const RecomputeModules& modules = {});

// The share of a rank's parameter all-gather its next forward waits for before starting: with
// plan.overlap_param_gather the first bucket's (Megatron-Core gathers bucket by bucket, in the
// gradient buckets' layout, each forward pre-hook waiting for its bucket: distributed_data_
// parallel.py), grad_bucket_bytes of the rank's `grad_bytes`; else the whole gather, 1.
double param_gather_head_share(const ParallelPlan& p, double grad_bytes);

// The time of `op` ("p2p", "all_reduce", "all_gather", "reduce_scatter") of `bytes` over `ranks`
// on `link`: the profile's measurement where it has one and the link is inside a node, else
// `analytic_s`; extrapolations and missing ops go to `notes`.
double measured_comm_s(const Profile* prof, const char* op, int ranks, double bytes, const Link& link, double analytic_s,
                       std::vector<std::string>& notes);
// What a collective's flows carry in the simulator so that it takes `measured_s` on an idle link
// where the analytic price was `analytic_s`, of which `latency_s` is the latency the simulator pays
// apart from the bytes: the bytes times (measured - latency) / (analytic - latency), at least 0;
// exactly 1 when the two times are the same (analytic pricing).
double flow_scale(double measured_s, double analytic_s, double latency_s);

// The transfers at a stage's boundaries, out_bytes to the next stage and in_bytes back to the
// previous one, on the link between their ranks (measured where the profile has it): send_f_s,
// send_b_s and their bytes. One rule for every route (preset, graph).
struct Profile;
void set_boundary_transfers(StageCost& sc, const schedules::Schedule& s, int stage, const Topology& topo, double out_bytes,
                            double in_bytes, const Profile* prof, std::vector<std::string>& notes);
// The data-parallel reduction of sc.grad_bytes: a reduce-scatter with a distributed optimizer
// (zero 1 or 2), else an all-reduce on the dp group's path, or with several chains one ring over
// their copies (chain_reduce_link). Fills reduce_grad_s and reduce_grad_latency_s. Zero 3
// reduce-scatters inside each backward (fsdp.h): nothing at the iteration's end, or under hybrid
// sharding an all-reduce of the shard (grad_bytes / shard_group) over the replica groups.
void set_grad_reduction(StageCost& sc, const schedules::Schedule& s, int stage, const Topology& topo, const ParallelPlan& p,
                        const Profile* prof, std::vector<std::string>& notes);

// Zero 3 (fsdp.h): the stage's units (its embedding, `layers` layers, its head) gathered and
// reduce-scattered on the shard group, with the compute of each from the stage's durations and
// `ic`'s end pieces; adds the exposed collectives to f_s, b_s, i_s, w_s and the gathered units
// to work_bytes. InputError where a stage has no layers to shard by (unit costs).
void set_fsdp(StageCost& sc, const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Topology& topo, bool first,
              bool last, const Profile* prof, std::vector<std::string>& notes);

// DualPipe's overlapped forward-backward pair (DeepSeek-V3, arXiv 2412.19437, Sec. 3.2.1 and
// Fig. 4): the forward of one microbatch and the backward of another run as one action, each
// half's expert all-to-alls (StageCost::moe) behind the other half's compute. The pair takes
// max(F_c + B_c + slowdown, F_a + B_a), with _a the all-to-alls, _c the rest, and the slowdown
// the compute lost to the SMs the communication kernels hold while they run beside it
// (kDualPipeCommSms of gpu_sms: DeepSeek-V3 Sec. 3.2.2, 20 of the H800's 132). Priced per stage
// with the forward half taken as the backward stage's own forward (exact where a pair's two
// stages hold alike layers, as DualPipe's balanced stages do): overlap_b_s and overlap_i_s are
// the pair less f_s. Without experts, b_s and i_s: the pair is F + B.
inline constexpr int kDualPipeCommSms = 20;
void set_overlapped_pair(StageCost& sc, int gpu_sms);
// What the backward half of an OVERLAP_F_B costs: overlap_b_s (op B) or overlap_i_s (op I), or
// b_s, i_s where not set. One rule for the evaluator and the simulator.
double overlapped_backward_s(const StageCost& sc, schedules::Op op);

// Per rank, from t.params (one GPU's parameters of each pipeline rank): the optimizer step
// (measured per parameter where the profile has it), static memory, and with a distributed
// optimizer the parameter all-gather (bytes, seconds and the share the next forward waits for).
// With FP8, t.fp8_params add their FP8 copies to static memory and their casts to the step.
void set_rank_costs(CostTable& t, const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Topology& topo,
                    const Profile* prof);

// Seconds of one optimizer step over `params` parameters of one GPU, analytic: its memory
// traffic (memory.h) at the GPU's bandwidth, 1/shard of it with a distributed optimizer (zero >= 1,
// shard_degree in fsdp.h).
double optimizer_step_s(const ModelSpec& m, const ClusterSpec& c, double params, int shard);

// Analytic costs: FLOPs (flops.h) over achieved throughput (peak x efficiency), tensor-parallel
// all-reduces folded into F, B, I and R (two per layer each way, Megatron-LM) on the tp
// group's link, p2p on the link between the two pipeline ranks, ring all-reduce of gradients
// on the dp group's link, offload on the host link, memory from memory.h.
//
// With a profile (profile.h), measured layer times replace FLOPs over throughput (they include
// the tensor-parallel all-reduces when measured at that tp; otherwise the analytic all-reduce
// is added), measured activation bytes replace the formulas, measured collectives replace the
// alpha-beta model on links inside a node, and a measured optimizer step replaces the
// memory-bandwidth estimate. Interpolations and extrapolations are listed in `notes`.
struct Profile;
CostTable analytic_cost_table(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p,
                              const schedules::Schedule& s, const Profile* profile = nullptr);

}  // namespace stagecraft::costmodel
