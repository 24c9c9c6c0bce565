#include "runtime/support/rules.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "costmodel/topology.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::runtime {
// The rules read plans and models through the cost model's specs and accounting throughout.
using namespace costmodel;

namespace {

using schedules::Action;
using schedules::Op;
using schedules::Schedule;

// Tensor-parallel overlap (runtime/tp_pieces.h) splits each microbatch of a stage into two equal
// sub-batches along the batch dimension and runs the stage's layers block by block.
std::vector<schedules::TpOverlap> splitting_modes(const ParallelPlan& p) {
  std::vector<schedules::TpOverlap> out;
  if (p.tp == 1) return out;
  std::vector<schedules::TpOverlap> all = p.stage_tp_overlap;
  all.push_back(p.tp_overlap);
  for (auto m : all)
    if (m != schedules::TpOverlap::Blocking) out.push_back(m);
  return out;
}

// Context parallelism (runtime/cp.h): the built-in decoder's ring attention, its ranks next to
// the data-parallel ones in the rank order (the runtime's grid holds dp x cp as one axis), and
// not with experts (their groups are carved from dp alone there).
void check_context_parallel(const ParallelPlan& p, bool builtin_decoder) {
  if (p.cp == 1) return;
  const std::string cp = "runtime: plan.cp = " + std::to_string(p.cp);
  if (!builtin_decoder) throw InputError(cp + " with a TorchScript model: ring attention is the built-in decoder's (allowed: cp = 1)");
  if (p.ep > 1)
    throw InputError(cp + " with plan.ep = " + std::to_string(p.ep) +
                     " is not supported by the runtime (its expert groups split dp alone); allowed: ep = 1 with cp > 1");
  const auto axes = rank_axes(p.rank_order);
  const auto at = [&](Axis a) { return std::find(axes.begin(), axes.end(), a) - axes.begin(); };
  if (std::abs(at(kCp) - at(kDp)) != 1)
    throw InputError(cp + " with plan.rank_order = \"" + p.rank_order +
                     "\": the runtime needs cp next to dp in the order (allowed e.g. tp-cp-dp-pp, tp-dp-cp-pp, tp-dp-pp)");
}

// Fully sharded data parallelism (runtime/fsdp.h): the built-in decoder's units (layers, the
// embedding, the head) gathered around their passes; sharded over the whole dp (x cp) group.
void check_fully_sharded(const ParallelPlan& p, bool builtin_decoder) {
  if (p.zero != 3) return;
  if (!builtin_decoder)
    throw InputError("runtime: plan.zero = 3 with a TorchScript model: the runtime gathers the built-in decoder's units only "
                     "(allowed: zero 0, 1, 2)");
  const bool hybrid = p.shard_group != 0 && p.shard_group != p.dp;
  if (hybrid && p.shard_group < 2)
    throw InputError("runtime: plan.shard_group = " + std::to_string(p.shard_group) +
                     " shards nothing (allowed: 0, or 2 to dp = " + std::to_string(p.dp) + ")");
  if (hybrid && p.cp > 1)
    throw InputError("runtime: plan.shard_group = " + std::to_string(p.shard_group) + " (hybrid sharding) with plan.cp = " +
                     std::to_string(p.cp) + " is not supported by the runtime (allowed: cp = 1, or shard_group 0 or dp)");
  for (auto m : splitting_modes(p))
    throw InputError("runtime: plan.zero = 3 with tp_overlap '" + std::string(schedules::tp_overlap_name(m)) +
                     "' is not supported (its pieces run the layers block by block); allowed: blocking");
}

bool splits_backward(const Schedule& s) {
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (a.op == Op::W || a.op == Op::I || (a.op == Op::OVERLAP_F_B && a.b_op == Op::I)) return true;
  return false;
}

// Transformer Engine's overlap at any tp (at tp 1 it overlaps nothing, but the runtime has no
// such mode to run either way).
bool asks_te(const ParallelPlan& p) {
  if (p.tp_overlap == schedules::TpOverlap::Te) return true;
  return std::find(p.stage_tp_overlap.begin(), p.stage_tp_overlap.end(), schedules::TpOverlap::Te) != p.stage_tp_overlap.end();
}

void check_sub_batches(const ParallelPlan& p) {
  if (asks_te(p))
      throw InputError("runtime: tp_overlap 'te' (Transformer Engine's chunked collectives) is priced by estimate, compare, "
                       "simulate and plan but not executed by the runtime (allowed: blocking, merak, cross-pass, oases)");
  for (auto mode : splitting_modes(p))
    if (p.microbatch_size % 2 != 0)
      throw InputError("runtime: tp_overlap '" + std::string(schedules::tp_overlap_name(mode)) +
                       "' splits each microbatch into two sub-batches, so microbatch_size must be even (got " +
                       std::to_string(p.microbatch_size) + "); use an even --microbatch-size or --tp-overlap blocking");
}

// Mixture of experts (runtime/moe.h): what the runtime's MoE layers and expert parallelism run,
// beyond the cost model's own checks (tp > 1 with experts needs sequence parallelism there).
void check_experts(const ModelSpec& m, const ParallelPlan& p) {
  if (!is_moe(m)) return;  // ep > 1 without experts: the cost model's own refusal
  if (m.moe_capacity_factor > 0)
    throw InputError("runtime: model.moe_capacity_factor = " + std::to_string(m.moe_capacity_factor) +
                     ": the runtime's MoE layers are dropless (every routed token is computed; allowed: 0)");
  if (m.moe_node_limit > 0)
    throw InputError("runtime: model.moe_node_limit = " + std::to_string(m.moe_node_limit) +
                     ": node-limited routing is not implemented by the runtime (plain top-k over every expert; allowed: 0)");
  if (expert_tp(p) != p.tp)
    throw InputError("runtime: plan.etp = " + std::to_string(p.etp) + " with tp = " + std::to_string(p.tp) +
                     ": the runtime slices every expert over the attention's tp ranks (allowed: etp 0 or " +
                     std::to_string(p.tp) + ")");
  check_expert_reductions(reduction_plan(p));
}

// Whether some rank reduces a stage's gradients before the stage's first compute action: a
// share deferred to the next iteration (FOLD3D; the rule is schedules::deferred_reductions).
bool defers_reductions(const Schedule& s) {
  for (const auto& list : s.actions) {
    const std::vector<bool> deferred = schedules::deferred_reductions(list);
    if (std::find(deferred.begin(), deferred.end(), true) != deferred.end()) return true;
  }
  return false;
}

}  // namespace

void check_vocab_parallel(const ModelSpec& m, int tp) {
  if (m.vocab_size % tp != 0)
    throw InputError("model.vocab_size = " + std::to_string(m.vocab_size) + " is not divisible by tp = " +
                     std::to_string(tp) + " (the runtime splits the embedding and the LM head by vocabulary, as "
                     "Megatron-LM; pad the vocabulary to a multiple of tp)");
}

void check_runtime_plan(const ModelSpec& m, const ParallelPlan& p, bool builtin_decoder) {
  if (m.fp8)
    throw InputError("runtime: model.fp8 = true (--fp8) is not implemented by the runtime: its linear layers run in fp32 "
                     "or bf16 (allowed: --precision fp32 or bf16; FP8 products need torch._scaled_mm on an H100-class GPU)");
  if (m.bytes_per_moment != 4 || m.bytes_per_master != -1)
    throw InputError("runtime: model.bytes_per_moment = " + std::to_string(m.bytes_per_moment) + ", bytes_per_master = " +
                     std::to_string(m.bytes_per_master) + ": narrower optimizer states are priced by estimate, compare, "
                     "simulate and plan but not implemented by the runtime, whose Adam keeps fp32 states (allowed: 4 and -1)");
  if (!p.cuda_graph_scope.empty())
    throw InputError("runtime: plan.cuda_graph_scope is priced by estimate, compare, simulate and plan (the host's launches, "
                     "costmodel/host.h) but the runtime captures no CUDA graphs (allowed: none)");
  check_context_parallel(p, builtin_decoder);
  if (builtin_decoder) check_experts(m, p);
  check_fully_sharded(p, builtin_decoder);
  check_sub_batches(p);  // before the cost model's fit checks: the runtime's own reason
  if (p.sequence_parallel)
    for (auto mode : splitting_modes(p))
      throw InputError("runtime: sequence parallelism with tp_overlap '" + std::string(schedules::tp_overlap_name(mode)) +
                       "' is not supported (its pieces run the blocks with Megatron's all-reduces); allowed: blocking");
  if (!builtin_decoder) return;
  if (m.kind == ModelKind::Bert)
    throw InputError("runtime: model '" + m.name + "' is of kind " + std::string(kind_name(m.kind)) +
                     "; the runtime builds decoders only (kinds gpt and llama)");
}

ReductionPlan reduction_plan(const ParallelPlan& p) { return ReductionPlan{p.ep, p.zero, p.preemptive_comm}; }

void check_expert_reductions(const ReductionPlan& p) {
  if (p.ep > 1 && p.zero != 0)
    throw InputError("runtime: plan.zero = " + std::to_string(p.zero) + " with plan.ep = " + std::to_string(p.ep) +
                     " is not implemented by the runtime (the distributed optimizer does not shard the routed experts "
                     "over the expert-data-parallel group); allowed: zero = 0 with ep > 1, or ep = 1");
  if (p.ep > 1 && p.preemptive_comm)
    throw InputError("runtime: plan.preemptive_comm = true with plan.ep = " + std::to_string(p.ep) +
                     " is not implemented by the runtime (the experts' reductions run on their own group); allowed: ep = 1");
}

void check_runtime_schedule(const ParallelPlan& p, const Schedule& s) { check_reduction_schedule(reduction_plan(p), s); }

void check_reduction_schedule(const ReductionPlan& p, const Schedule& s) {
  const bool chains = s.num_chains > 1;
  if (p.ep > 1 && chains)
    throw InputError("runtime: plan.ep = " + std::to_string(p.ep) + " is not supported with schedule '" + s.name +
                     "' (its chains reduce copies of a stage jointly); allowed with ep > 1: schedules of one pipeline chain");
  const bool deferred = defers_reductions(s);
  if (p.ep > 1 && deferred)
    throw InputError("runtime: plan.ep = " + std::to_string(p.ep) + " is not supported with schedule '" + s.name +
                     "' (it defers gradient reductions to the next iteration); allowed with ep > 1: schedules that "
                     "reduce in the iteration");
  if (p.preemptive_comm && p.zero != 0)
    throw InputError("runtime: plan.preemptive_comm = true with plan.zero = " + std::to_string(p.zero) +
                     " is not supported (the distributed optimizer's reduce-scatters are not chunked); allowed: zero = 0");
  if (p.preemptive_comm && chains)
    throw InputError("runtime: plan.preemptive_comm = true is not supported with schedule '" + s.name +
                     "' (its chains reduce copies of a stage jointly); allowed: schedules of one pipeline chain");
  if (p.zero != 0 && chains)
    throw InputError("runtime: plan.zero = " + std::to_string(p.zero) + " is not supported with schedule '" + s.name +
                     "' (its chains reduce copies of a stage jointly); allowed here: 0");
  if (p.zero == 3 && splits_backward(s))
    throw InputError("runtime: plan.zero = 3 is not supported with schedule '" + s.name +
                     "' (its W actions compute weight gradients after the layer's unit is released); allowed: "
                     "schedules without a split backward");
  if (p.zero != 0 && deferred)
    throw InputError("runtime: plan.zero = " + std::to_string(p.zero) + " is not supported with schedule '" + s.name +
                     "' (it defers gradient reductions to the next iteration); allowed here: 0");
}

bool runtime_runs(const ModelSpec& m, const ParallelPlan& p) {
  try {
    check_runtime_plan(m, p);
    check_vocab_parallel(m, p.tp);
    check_runtime_schedule(p, plan_schedule(p));
    return true;
  } catch (const InputError&) {
    return false;
  }
}

std::string runtime_refusal(const ModelSpec& m, const ParallelPlan& p, const Schedule& s) {
  try {
    check_runtime_plan(m, p);
    check_vocab_parallel(m, p.tp);
    check_runtime_schedule(p, s);
    return "";
  } catch (const InputError& e) {
    const std::string why = e.what();
    return why.substr(0, why.find('\n'));
  }
}

double runtime_static_bytes(const ModelSpec& m, const ParallelPlan& p) {
  ModelSpec fp32 = m;  // as the runtime holds it: fp32 weights and gradients, whatever the model's training precision
  fp32.bytes_per_param = 4;
  fp32.bytes_per_grad = 4;
  fp32.bytes_per_master = -1;  // and its Adam's fp32 states
  fp32.bytes_per_moment = 4;
  return memory::static_lower_bound_bytes(fp32, p);
}

void check_runtime_memory(const ModelSpec& m, const ParallelPlan& p, double per_rank_bytes, const std::string& memory) {
  const double need = runtime_static_bytes(m, p);
  if (need <= per_rank_bytes) return;
  const auto gib = [](double b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f GiB", b / (1024.0 * 1024.0 * 1024.0));
    return std::string(s);
  };
  throw InputError("runtime: model '" + m.name + "' with dp " + std::to_string(p.dp) + ", tp " + std::to_string(p.tp) +
                   ", pp " + std::to_string(p.pp) + ", zero " + std::to_string(p.zero) + " needs at least " + gib(need) +
                   " per rank (fp32 weights, gradients and AdamW states, before any activation), and a rank has " +
                   gib(per_rank_bytes) + " (" + memory + "); allowed: a plan within it (a smaller model, larger --tp or --pp, "
                   "--zero 1 or 3) or a machine with more memory");
}

}  // namespace stagecraft::runtime
