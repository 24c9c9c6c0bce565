#include "runtime/plan.h"

#include "runtime/device.h"
#include "runtime/model.h"
#include "runtime/optim.h"

#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "runtime/support/rules.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;
using schedules::Schedule;

namespace {

[[noreturn]] void refuse(const Schedule& s, const Action& a, const std::string& why) {
  throw InputError("runtime: cannot execute action " + schedules::to_text(a) + " of schedule '" + s.name + "': " + why);
}

// A REDUCE_GRAD before the stage's first compute action is a deferred share (FOLD3D): it
// reduces and applies the previous iteration's gradients before the stage's forwards read
// the parameters, which keeps the training exact. One between the stage's first compute
// action and its last backward would reduce gradients still being accumulated: refused.
void check_reductions(const Schedule& s, int rank) {
  const auto& list = s.actions[static_cast<size_t>(rank)];
  std::map<int, int> first_compute, last_backward;  // stage -> position
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const int at = static_cast<int>(i);
    if (schedules::is_compute(a.op) && a.op != Op::OPTIMIZER) first_compute.emplace(a.stage, at);
    if (a.op == Op::B || a.op == Op::W || a.op == Op::I) last_backward[a.stage] = at;
    if (a.op == Op::OVERLAP_F_B) last_backward[a.b_stage] = at, first_compute.emplace(a.b_stage, at);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const int at = static_cast<int>(i);
    if (a.op != Op::REDUCE_GRAD) continue;
    auto first = first_compute.find(a.stage);
    auto last = last_backward.find(a.stage);
    if (first != first_compute.end() && first->second < at && last != last_backward.end() && last->second > at)
      refuse(s, a, "it lies between the stage's first compute action and its last backward, where the gradients "
                   "are still accumulating; a deferred share must precede the stage's first forward");
  }
}

// OFFLOAD moves a stage's checkpoint (its saved input) to host memory; that frees memory only
// when the stage recomputes, since otherwise autograd keeps the layers' activations anyway.
void check_offloads(const Schedule& s, int rank) {
  const auto& list = s.actions[static_cast<size_t>(rank)];
  for (const Action& a : list) {
    if (a.op != Op::OFFLOAD) continue;
    bool recomputed = false;
    for (const Action& r : list)
      if (r.op == Op::R && r.stage == a.stage && r.microbatch == a.microbatch && r.fraction > 0) recomputed = true;
    if (!recomputed)
      refuse(s, a, "the runtime offloads checkpoints of recomputed stages only, and this (stage, microbatch) has no R");
  }
}

void check_action(const Schedule& s, const Action& a) {
  if (schedules::is_fsdp(a.op))
    refuse(s, a, "FSDP's UNSHARD and RESHARD are not executed as actions by the runtime (with plan.zero = 3 it gathers "
                 "each layer around its passes itself: run the generator's schedule with --zero 3)");
  if (a.sub_batch >= 0)
    refuse(s, a, "sub-batch actions are not implemented by the runtime (it splits a microbatch inside a stage action "
                 "with tp_overlap merak, cross-pass or oases)");
  if (schedules::is_p2p(a.op) && a.peer >= 0) {
    bool fwd = a.op == Op::SEND_F || a.op == Op::RECV_B;
    int implied = fwd ? s.next_stage(a.stage) : s.prev_stage(a.stage);
    if (a.peer != implied) refuse(s, a, "its peer stage is not the adjacent stage of the same pipeline");
  }
  if (a.op == Op::OVERLAP_F_B && a.b_op != Op::B && a.b_op != Op::I)
    refuse(s, a, "the backward half must be B or I");
}

// Several chains (Chimera): the copies of a model part sit on different ranks and reduce the
// same shares in the same order, so that their buckets meet in one all-reduce group.
void check_chains(const Schedule& s) {
  const int S = s.stages_per_chain();
  auto fractions = [&s](int stage) {
    std::vector<double> f;
    for (const Action& a : s.actions[static_cast<size_t>(s.rank_of(stage))])
      if (a.op == Op::REDUCE_GRAD && a.stage == stage) f.push_back(a.fraction);
    return f;
  };
  for (int part = 0; part < S; ++part) {
    std::set<int> ranks;
    for (int c = 0; c < s.num_chains; ++c) {
      int stage = c * S + part;
      if (!ranks.insert(s.rank_of(stage)).second)
        throw InputError("runtime: schedule '" + s.name + "' places two copies of model part " + std::to_string(part) +
                         " on rank " + std::to_string(s.rank_of(stage)) + "; each copy must have its own rank");
      if (fractions(stage) != fractions(part))
        throw InputError("runtime: schedule '" + s.name + "': stages " + std::to_string(part) + " and " + std::to_string(stage) +
                         " (copies of model part " + std::to_string(part) + ") reduce different gradient shares");
    }
  }
}

void check_overlapped_parts(const costmodel::ParallelPlan& p, const std::vector<int>& part_layers) {
  if (!p.stage_tp_overlap.empty() && p.stage_tp_overlap.size() != part_layers.size())
    throw InputError("plan.stage_tp_overlap has " + std::to_string(p.stage_tp_overlap.size()) + " entries; the schedule has " +
                     std::to_string(part_layers.size()) + " stages per pipeline");
  if (p.tp == 1) return;
  for (size_t part = 0; part < part_layers.size(); ++part)
    if (p.overlap_of(static_cast<int>(part)) != schedules::TpOverlap::Blocking && part_layers[part] < 1)
      throw InputError("runtime: tp_overlap '" + std::string(schedules::tp_overlap_name(p.overlap_of(static_cast<int>(part)))) +
                       "': model part " + std::to_string(part) + " has no transformer layer to overlap");
}

// The built-in decoder (GptPart): the model's fields, tp against its heads, MLP and vocabulary,
// the attention kernel this LibTorch has (its kind: runtime::check_runtime_plan).
void check_decoder(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p, int world) {
  costmodel::check(m);
  costmodel::ClusterSpec local;
  local.name = "local ranks";
  local.nodes = 1;
  local.gpus_per_node = world;
  costmodel::check_fit(m, local, p);  // tp divides the heads and the MLP width
  runtime::check_vocab_parallel(m, p.tp);  // and the vocabulary (GptPart's split)
  check_attention_kernel(m, p.cp);
}

// A TorchScript model: one tp rank, whole layers (subgraphs), and example shapes whose first
// dimension is the microbatch size.
void check_script(const TrainOptions& opt) {
  if (opt.script_path.empty()) return;
  const auto& p = opt.plan;
  auto no = [](const std::string& what, const std::string& allowed) {
    throw InputError("runtime: " + what + " is not supported for a TorchScript model (allowed: " + allowed + ")");
  };
  if (p.tp != 1) no("plan.tp = " + std::to_string(p.tp), "1");
  if (p.ep != 1) no("plan.ep = " + std::to_string(p.ep) + " (expert parallelism)", "1");
  if (p.recompute == costmodel::RecomputePolicy::Selective) no("plan.recompute = selective", "none, full");
  if (opt.example_shapes.size() != 2)
    throw InputError("--example-shape given " + std::to_string(opt.example_shapes.size()) +
                     " times; a TorchScript model to train needs two: its input's and its target's");
  for (const auto& shape : opt.example_shapes)
    if (shape.empty() || shape[0] != p.microbatch_size)
      throw InputError("--example-shape: the first dimension (" + (shape.empty() ? std::string("none") : std::to_string(shape[0])) +
                       ") is the microbatch size, plan.microbatch_size = " + std::to_string(p.microbatch_size));
}

}  // namespace

void check_executable(const Schedule& s) {
  if (s.num_chains > 1) check_chains(s);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.actions[static_cast<size_t>(r)]) check_action(s, a);
    check_reductions(s, r);
    check_offloads(s, r);
  }
}

RunPlan make_run_plan(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p) {
  RunPlan rp;
  rp.schedule = costmodel::plan_schedule(p);
  check_executable(rp.schedule);
  rp.part_layers = costmodel::partition_layers(m, p, rp.schedule.stages_per_chain());
  check_overlapped_parts(p, rp.part_layers);
  int first = 0;
  for (int n : rp.part_layers) {
    rp.part_first_layer.push_back(first);
    first += n;
  }
  return rp;
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::Fp32;
  if (s == "bf16") return Precision::Bf16;
  throw InputError("--precision '" + s + "' is invalid (allowed: fp32, bf16; FP8 is the model's --fp8, which estimate, compare, "
                   "simulate and plan price and the runtime does not run)");
}

WeightCopies parse_weight_copies(const std::string& s) {
  if (s == "kept") return WeightCopies::Kept;
  if (s == "cast") return WeightCopies::Cast;
  throw InputError("--bf16-weights '" + s + "' is invalid (allowed: kept, cast)");
}

namespace {

// Ranks of this job on this machine: the whole world with --nproc (the launcher and its ranks) or
// without a launcher, else torchrun's LOCAL_WORLD_SIZE, else this process alone (a lower count
// only refuses less).
int local_ranks(int world) {
  if (launched_locally() || !world_from_environment()) return world;
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  const int n = v ? std::atoi(v) : 0;
  return n >= 1 ? n : 1;
}

// A model whose weights, gradients and AdamW states alone exceed a rank's memory, refused before
// any rank starts (runtime::check_runtime_memory); a TorchScript module's size is not predicted.
void check_memory(const TrainOptions& opt, const std::string& backend, int world) {
  if (!opt.script_path.empty()) return;
  std::string what;
  const double per_rank = memory_per_rank(device_for_backend(backend, 0), local_ranks(world), what);
  runtime::check_runtime_memory(opt.model, opt.plan, per_rank, what);
}

}  // namespace

void preflight(const TrainOptions& opt, int world) {
  costmodel::check(opt.plan);
  const auto& p = opt.plan;
  // The plan's fields the runtime runs (runtime/support/rules.h: the rules `plan --for-runtime` searches by).
  runtime::check_runtime_plan(opt.model, p, opt.script_path.empty());
  if (p.num_gpus() != world)
    throw InputError("plan: dp*tp*pp" + std::string(p.cp > 1 ? "*cp" : "") + " = " + std::to_string(p.dp) + "*" + std::to_string(p.tp) +
                     "*" + std::to_string(p.pp) + (p.cp > 1 ? "*" + std::to_string(p.cp) : std::string()) +
                     " = " + std::to_string(p.num_gpus()) + " ranks, but the world has " + std::to_string(world) +
                     " processes (--nproc or WORLD_SIZE); they must be equal");
  if (opt.script_path.empty()) check_decoder(opt.model, p, world);
  check_script(opt);
  if (opt.steps < 1) throw InputError("--steps = " + std::to_string(opt.steps) + " must be at least 1");
  if (opt.timeout_s <= 0) throw InputError("--timeout must be positive");
  const std::string backend = resolve_backend(opt.backend);
  parse_precision(opt.precision);
  parse_weight_copies(opt.bf16_weights);
  const torch::Device device = device_for_backend(backend, 0);
  if (opt.tf32 && !device.is_cuda())
    throw InputError("--tf32: TF32 is a GPU tensor-core format and this run computes on the CPU (backend " + backend +
                     "); allowed on the CPU: without --tf32");
  if (parse_adamw_kernel(opt.adamw) == AdamWKernel::Fused && !fused_adamw_available(device))
    throw InputError("--adamw fused: this build's LibTorch (" TORCH_VERSION ") has no fused AdamW on " +
                     std::string(device.is_cuda() ? "a GPU" : "the CPU") +
                     " (at::_fused_adamw_: LibTorch 2.1 or later on a GPU, 2.4 or later on the CPU); allowed here: loop, foreach");
  const RunPlan rp = make_run_plan(opt.model, p);
  runtime::check_runtime_schedule(p, rp.schedule);
  check_memory(opt, backend, world);
}

}  // namespace stagecraft::runtime
