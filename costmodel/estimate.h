// The whole path from a model, a cluster and a plan to a prediction: generate the plan's
// schedule, lower it, add recomputation, cost it analytically and evaluate it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "costmodel/plan_workload.h"
#include "costmodel/specs.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

namespace stagecraft::costmodel {

struct Profile;

struct EstimateOptions {
  EvalOptions eval;               // iterations, memory, trace recording
  schedules::LowerOptions lower;  // where receives go, reductions, optimizer
  const Profile* profile = nullptr;  // measured costs (profile.h) instead of the analytic ones
};

// Generator options from a plan: ranks = pp, microbatches = num_microbatches, chunks and the
// rest from schedule_params (keys the generator does not read are refused).
schedules::GeneratorOptions generator_options(const ParallelPlan& p);
// Whether plan.schedule names a schedule file (ending in .csv, PyTorch's format, or .json,
// stagecraft's; schedules/io.h) instead of a registered generator.
bool is_schedule_file(const std::string& schedule);
// The lowered schedule the plan runs, with R before each backward for full recomputation
// unless the generator places recomputation itself (merak's stage-aware shares, merak-early-
// recompute, FOLD3D: their schedules carry recompute_fractions or recompute in params). A
// schedule file gives its compute actions (its ranks must equal pp and its microbatches the
// plan's; InputError naming the field otherwise), lowered the same way: every engine
// (estimate, compare, simulate, train) runs an imported schedule as it runs a generated one.
schedules::Schedule plan_schedule(const ParallelPlan& p, const schedules::LowerOptions& lower = {});

// Whether a plan's peak fits a GPU: within the usable memory (gpu_memory_bytes less the cluster's
// memory_margin, whose sources ClusterSpec::memory_margin cites: fragmentation and workspaces
// the model does not count), tight (over the usable memory but within the GPU's: it runs only if
// the allocator fragments less than the margin allows for), or does not fit (over the GPU's memory).
enum class Fit { Fits, Tight, DoesNotFit };
Fit fit_verdict(double peak_bytes, const ClusterSpec& c);
std::string_view fit_name(Fit f);  // "fits", "tight", "does not fit"

struct Estimate {
  ModelSpec model;
  ClusterSpec cluster;
  ParallelPlan plan;
  schedules::Schedule schedule;     // lowered
  std::shared_ptr<const PlanWorkload> workload;  // what the plan computes, moves and keeps (built once)
  CostTable costs;                  // the workload priced (price(workload, ...))
  EvalResult eval;
  double tokens_per_s = 0;          // global batch * seq_length / iteration time
  double model_flops = 0;           // per iteration, no recomputation (flops.h)
  double tflops_per_gpu = 0;        // model FLOPs per second per GPU, in TFLOP/s
  double mfu = 0;                   // tflops_per_gpu over the GPU's (dense 16-bit) peak
  double mfu_fp8 = 0;               // over its dense FP8 peak, when the model runs FP8 (else 0):
                                    // published FP8 tables quote either
  double hardware_flops = 0;        // per iteration, recomputation counted (flops.h)
  double hfu = 0;                   // hardware FLOPs per second per GPU over the GPU's peak
  double max_memory_bytes = 0;      // largest per-rank peak
  double usable_memory_bytes = 0;   // per GPU: gpu_memory_bytes less the cluster's memory_margin
  std::vector<double> headroom_bytes;  // (ranks) usable_memory_bytes - the rank's peak; < 0: over
  bool fits = false;                // every rank's peak within usable_memory_bytes
  Fit fit = Fit::DoesNotFit;        // the verdict on the largest peak (fit_verdict)
  std::string profile_source;       // the profile the costs came from; empty: analytic
};

// Gradient buckets of each stage with plan.overlap_grad_reduce: ceil(grad_bytes /
// grad_bucket_bytes), at least 1 (schedules/buckets.h).
std::vector<int> grad_buckets(const CostTable& costs, const ParallelPlan& p);
// Layer forwards times samples that the schedule's recompute actions repeat in one iteration,
// over every replica: dp x microbatch size x the sum over R actions of round(fraction x the
// layers of the action's stage) (partition_layers; recomputation by whole layers, as
// recomputed_layer_share prices its time and memory).
double recomputed_layer_samples(const schedules::Schedule& s, const ModelSpec& m, const ParallelPlan& p);
// hardware_flops_per_iteration (flops.h) of plan p running schedule s.
double hardware_flops(const schedules::Schedule& s, const ModelSpec& m, const ParallelPlan& p);
// One rank's compute time by kind: its compute actions' priced passes in their kinds
// (StageCost::kinds_f, kinds_b; an I or W the backward's kinds in its share, an R the forward's),
// the optimizer step, and what the evaluator's compute time holds beyond those (`other_s`:
// overlapped pairs' savings, negative; copies and waits the evaluator counts as compute). The
// measured counterpart is `train --op-times` (runtime/op_times.h).
struct ComputeByKind {
  PassKinds passes;
  double optimizer_s = 0;
  double other_s = 0;
};
// Per rank; empty when the costs are not analytic (profiled or unit costs).
std::vector<ComputeByKind> compute_by_kind(const Estimate& e);

// Fills tokens_per_s, tflops_per_gpu, mfu and hfu from the iteration time and the FLOP counts.
void set_rates(Estimate& e);
// Fills max_memory_bytes, usable_memory_bytes, headroom_bytes and fits from the per-rank peaks.
void set_fit(Estimate& e);

// The one assembly of a prediction from a plan's lowered schedule (plan_schedule): the cost table
// (analytic_cost_table, measured where `profile` says), the gradient buckets with
// overlap_grad_reduce, the evaluation, FLOPs, rates and the fit verdict. `evaluator_for` gives
// the compiled evaluator of the (bucketed) schedule; its second argument names the buckets
// (empty without them), so that a caller can reuse evaluators (the planner's cache).
using EvaluatorFor = std::function<const Evaluator&(const schedules::Schedule& s, const std::string& buckets)>;
Estimate assemble_estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, schedules::Schedule lowered,
                           const Profile* profile, const EvaluatorFor& evaluator_for);
// Its two halves, for a caller that looks at the cost table before evaluating (the planner:
// untimed_peak_memory_bytes): the workload and its cost table; then the rest, from them.
Estimate price_estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const schedules::Schedule& lowered,
                        const Profile* profile);
Estimate evaluate_estimate(Estimate priced, schedules::Schedule lowered, const EvaluatorFor& evaluator_for);
// Its first half, which every route shares (the graph route too, graphs/estimate.h, which counts
// its FLOPs from its nodes): the schedule's gradient buckets (with overlap_grad_reduce) and the
// evaluation of e.costs into e.schedule and e.eval.
void evaluate_costs(Estimate& e, schedules::Schedule lowered, const EvaluatorFor& evaluator_for);

// The segment numbers fold3d-aiao's search tries: 1 to num_layers / pp, at most 16.
int fold3d_max_segments(const ModelSpec& m, const ParallelPlan& p);

// Resolves the schedule parameters the cost model chooses, writing the choice into the plan:
//   merak: alpha1 absent or "auto" -> the largest alpha_1 whose peak memory fits every GPU
//          (Merak Sec. 5.2: "tune alpha_1 by increasing it until an OOM error"), by bisection;
//   merak-early-recompute: alpha1 "auto" likewise (absent stays full recomputation);
//   fold3d-aiao: fwd_bwd_ratio absent -> forward over backward time from the cost table;
//          segments absent or "auto" -> increase ns from 1 while the iteration gets faster
//          (FOLD3D Sec. IV's heuristic, judged by this cost model), at most fold3d_max_segments
//          (from offload_segments when that is given);
//          offload absent or "auto" (and no offload_segments) -> the fewest segments, from the
//          first, that offload their checkpoints for the plan to fit (all when none fits), for
//          each segment count tried.
ParallelPlan resolve_schedule_params(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p,
                                     const EstimateOptions& opt = {});

// resolve_schedule_params, then the prediction.
Estimate estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const EstimateOptions& opt = {});
nlohmann::json to_json(const Estimate& e);

}  // namespace stagecraft::costmodel
