#include "planner/space.h"

#include <algorithm>
#include <string>

#include "costmodel/estimate.h"
#include "runtime/support/rules.h"
#include "schedules/error.h"
#include "schedules/registry.h"

namespace stagecraft::planner {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;
using costmodel::RecomputePolicy;

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Whether `v` is among `values` (empty: every value is).
bool allowed(const std::vector<int>& values, int v) {
  return values.empty() || std::find(values.begin(), values.end(), v) != values.end();
}

// What the schedule's generator and Megatron-LM accept: interleaving needs pp > 1, microbatches a
// multiple of pp and at least one layer per stage; one stage runs 1F1B only (the others equal it).

bool schedule_fits(const ScheduleChoice& s, int pp, long microbatches, int layers) {
  if (s.chunks > 0) return pp > 1 && microbatches % pp == 0 && layers >= pp * s.chunks;
  if (pp == 1) return s.name == "1f1b";
  return layers >= pp;
}

// Whether the space tries some tp degree above 1 (the degrees enumerate() takes).
bool tries_tensor_parallelism(const PlanSpace& space, const ModelSpec& m, const ClusterSpec& c) {
  const int gpus = space.gpus > 0 ? space.gpus : c.num_gpus();
  const int max_tp = space.max_tp > 0 ? space.max_tp : c.gpus_per_node;
  for (int tp : divisors(gpus))
    if (tp > 1 && tp <= max_tp && costmodel::tp_divides(m, tp) && allowed(space.tp_degrees, tp)) return true;
  return false;
}

}  // namespace

void check(const PlanSpace& space, const ModelSpec& m, const ClusterSpec& c) {
  auto bad = [](const std::string& field, const std::string& value, const std::string& allowed) {
    throw InputError("plan space: " + field + " = " + value + " is invalid (" + allowed + ")");
  };
  costmodel::check_fp8(m, c);
  costmodel::ParallelPlan graphs;
  graphs.cuda_graph_scope = space.cuda_graph_scope;
  costmodel::cuda_graph_scopes_of(graphs);  // names and combinations, before any search
  if (space.fp8.empty()) bad("precisions", "(none)", "give at least one (bf16, fp8)");
  if (space.for_runtime && (m.fp8 || std::find(space.fp8.begin(), space.fp8.end(), true) != space.fp8.end()))
    bad("precisions", "fp8", "with --for-runtime: the runtime's linear layers run in fp32 or bf16; allowed: bf16");
  if (space.fp8_recipes.empty()) bad("precisions", "(no FP8 recipe)", "give at least one recipe");
  for (bool f : space.fp8)
    for (costmodel::Fp8Recipe r : space.fp8_recipes)
      if (f && !m.fp8) {
        ModelSpec f8 = m;
        f8.fp8 = true;
        f8.fp8_recipe = r;
        try {
          costmodel::check(f8);
          costmodel::check_fp8(f8, c);
        } catch (const InputError& e) {
          bad("precisions", r == costmodel::Fp8Recipe::Delayed ? "fp8" : std::string(costmodel::fp8_recipe_name(r)), e.what());
        }
      }
  if (space.gpus < 0 || space.gpus > c.num_gpus())
    bad("gpus", std::to_string(space.gpus), "must be 0 (all) or at most the " + std::to_string(c.num_gpus()) + " of cluster '" + c.name + "'");
  if (space.global_batch < 1) bad("global_batch", std::to_string(space.global_batch), "must be at least 1 sequence");
  if (space.schedules.empty()) bad("schedules", "(none)", "give at least one");
  for (const ScheduleChoice& s : space.schedules) {
    if (!s.params.is_object()) bad("schedules[" + s.name + "].params", s.params.dump(), "must be an object of generator parameters");
    costmodel::ParallelPlan p;  // a parameter the generator does not take: InputError naming the ones it does
    p.schedule = s.name;
    p.schedule_params = s.params;
    try {
      costmodel::generator_options(p);
    } catch (const InputError& e) {
      bad("schedules[" + s.name + "].params", s.params.dump(), e.what());
    }
  }
  if (space.microbatch_sizes.empty()) bad("microbatch_sizes", "(none)", "give at least one");
  for (int b : space.microbatch_sizes)
    if (b < 1) bad("microbatch_sizes", std::to_string(b), "each must be at least 1");
  for (int z : space.zero)
    if (z < 0 || z > 3) bad("zero", std::to_string(z), "allowed: 0, 1, 2, 3");
  if (space.cp_degrees.empty()) bad("cp_degrees", "(none)", "give at least one (1: no context parallelism)");
  for (int x : space.cp_degrees) {
    if (x < 1) bad("cp_degrees", std::to_string(x), "each must be at least 1");
    // A degree the model cannot take is refused here, not dropped silently (issue 52: "cp 2: no
    // plan fits, 0 of 0").
    if (x > 1 && m.attention_kernel != costmodel::AttentionKernel::Fused)
      bad("cp_degrees", std::to_string(x),
          "context parallelism needs the fused attention kernel: --attention-kernel fused; model '" + m.name +
              "' has materialized attention");
    if (!costmodel::cp_divides(m, x))
      bad("cp_degrees", std::to_string(x),
          "2 x cp must divide model '" + m.name + "''s sequence of " + std::to_string(m.seq_length) + " tokens");
  }
  for (int x : space.ep_degrees)
    if (x < 1 || !costmodel::ep_divides(m, x))
      bad("ep_degrees", std::to_string(x),
          costmodel::is_moe(m) ? "each must divide model '" + m.name + "''s " + std::to_string(m.num_experts) + " experts"
                               : "model '" + m.name + "' has no experts: only 1");
  if (space.shard_groups.empty()) bad("shard_groups", "(none)", "give at least one (0: the whole dp group)");
  for (int g : space.shard_groups)
    if (g < 0) bad("shard_groups", std::to_string(g), "each must be 0 (the whole dp group) or a group size of at least 1");
  if (space.recompute.empty()) bad("recompute", "(none)", "give at least one");
  if (space.tp_overlap.empty()) bad("tp_overlap", "(none)", "give at least one (blocking: no overlap)");
  // Modes that overlap nothing at tp = 1 (costmodel::tp_overlap_applies): refused here rather than
  // leaving an empty space ("no plan satisfies the flags together").
  const auto& modes = space.tp_overlap;
  if (std::find(modes.begin(), modes.end(), schedules::TpOverlap::Blocking) == modes.end() && !tries_tensor_parallelism(space, m, c))
    bad("tp_overlap", std::string(schedules::tp_overlap_name(space.tp_overlap.front())) + " with tp = 1 only",
        "a mode other than blocking overlaps tensor-parallel collectives, and the space tries no tp above 1; allowed: "
        "--tp-overlaps blocking, or --tp degrees above 1");
  if (space.max_tp < 0) bad("max_tp", std::to_string(space.max_tp), "must be 0 (one node) or more");
  if (m.num_heads < 1 || m.num_layers < 1) bad("model", m.name, "needs layers and heads");
  for (int t : space.tp_degrees) {
    if (t < 1) bad("tp_degrees", std::to_string(t), "each must be at least 1");
    if (!costmodel::tp_divides(m, t))
      bad("tp_degrees", std::to_string(t), "each must divide model '" + m.name + "''s " + std::to_string(m.num_heads) +
                                               " heads (and its key/value heads, hidden and FFN sizes)");
  }
  for (int q : space.pp_degrees) {
    if (q < 1) bad("pp_degrees", std::to_string(q), "each must be at least 1");
    if (q > m.num_layers)
      bad("pp_degrees", std::to_string(q), "at most model '" + m.name + "''s " + std::to_string(m.num_layers) + " layers, one stage each");
  }
  if (space.rank_orders.empty()) bad("rank_orders", "(none)", "give at least one, e.g. tp-dp-pp");
  for (const std::string& o : space.rank_orders) {
    costmodel::ParallelPlan p;
    p.rank_order = o;
    try {
      costmodel::check(p);
    } catch (const InputError&) {
      bad("rank_orders", o, "each a permutation of tp, dp, pp joined by '-', e.g. tp-dp-pp or tp-pp-dp");
    }
  }
}

ClusterSpec plan_cluster(const ClusterSpec& c, const PlanSpace& space) {
  ClusterSpec k = c;
  if (space.gpus > 0) k.nodes = (space.gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  return k;
}

std::vector<int> expert_degrees(const PlanSpace& space, const ModelSpec& m) {
  if (!space.ep_degrees.empty()) return space.ep_degrees;
  std::vector<int> out{1};
  if (costmodel::is_moe(m))
    for (int e = 2; e <= m.num_experts; e *= 2)
      if (m.num_experts % e == 0) out.push_back(e);
  return out;
}

std::vector<ParallelPlan> enumerate(const PlanSpace& space, const ModelSpec& m, const ClusterSpec& c) {
  check(space, m, c);
  const int gpus = space.gpus > 0 ? space.gpus : c.num_gpus();
  const int max_tp = space.max_tp > 0 ? space.max_tp : c.gpus_per_node;
  std::vector<ParallelPlan> out;
  for (int tp : divisors(gpus)) {
    if (tp > max_tp || !costmodel::tp_divides(m, tp) || !allowed(space.tp_degrees, tp)) continue;
    for (int pp : divisors(gpus / tp))
    for (int cp : space.cp_degrees) {
      if (pp > m.num_layers || !allowed(space.pp_degrees, pp)) continue;
      if ((gpus / (tp * pp)) % cp != 0) continue;
      if (!costmodel::cp_divides(m, cp)) continue;
      const int dp = gpus / (tp * pp * cp);
      if (space.global_batch % dp != 0) continue;
      for (int etp : costmodel::is_moe(m) ? space.expert_tp : std::vector<int>{0})
      for (int ep : expert_degrees(space, m)) {
      if (etp == 1 && tp == 1 && std::find(space.expert_tp.begin(), space.expert_tp.end(), 0) != space.expert_tp.end())
        continue;  // the same point as etp 0
      ParallelPlan degrees;  // the expert groups' ranks of this point (costmodel::expert_ranks)
      degrees.tp = tp;
      degrees.dp = dp;
      degrees.cp = cp;
      degrees.etp = etp;
      if (costmodel::expert_ranks(degrees) % ep != 0) continue;
      for (int b : space.microbatch_sizes) {
        if ((space.global_batch / dp) % b != 0) continue;
        const long mb = space.global_batch / dp / b;
        for (const ScheduleChoice& s : space.schedules) {
          if (!schedule_fits(s, pp, mb, m.num_layers)) continue;
          const bool owns_recompute = schedules::find_generator(s.name).owns_recompute;
          for (RecomputePolicy r : space.recompute)
            for (bool sp : space.sequence_parallel) {
              // A schedule that places its own recomputation is the same point under none and full.
              if (r == RecomputePolicy::Full && owns_recompute &&
                  std::find(space.recompute.begin(), space.recompute.end(), RecomputePolicy::None) != space.recompute.end())
                continue;
              if (sp && tp == 1) continue;
              if (!sp && costmodel::needs_sequence_parallel(m, tp)) continue;
              for (schedules::TpOverlap o : space.tp_overlap)
              for (int z : space.zero)
              for (int shard : z == 3 ? space.shard_groups : std::vector<int>{0})
              for (const std::string& order : space.rank_orders) {
                if (!costmodel::tp_overlap_applies(o, tp)) continue;  // nothing to overlap
                if (z > 0 && dp * cp == 1) continue;
                if (z == 2 && mb > 1) continue;  // zero 2 shards gradients: no accumulation (costmodel check)
                if (shard > 0 && (shard >= dp * cp || (dp * cp) % shard != 0)) continue;  // HSDP: two copies or more
                ParallelPlan p;
                p.dp = dp;
                p.tp = tp;
                p.pp = pp;
                p.cp = cp;
                p.ep = ep;
                p.etp = etp;
                p.microbatch_size = b;
                p.num_microbatches = static_cast<int>(mb);
                p.schedule = s.name;
                p.schedule_params = s.params;
                if (s.chunks > 0) p.schedule_params["chunks"] = s.chunks;
                p.recompute = r;
                p.sequence_parallel = sp;
                p.tp_overlap = o;
                p.zero = z;
                p.shard_group = shard;
                p.reshard_after_forward = z != 3 || space.reshard_after_forward;
                p.overlap_grad_reduce = space.overlap_grad_reduce;
                p.overlap_param_gather = space.overlap_param_gather && costmodel::gathers_after_step(p);
                p.grad_bucket_bytes = space.grad_bucket_bytes;
                p.grad_reduce_at = space.grad_reduce_at;
                p.preemptive_comm = space.preemptive_comm;
                p.stack = space.stack;
                p.cuda_graph_scope = space.cuda_graph_scope;
                p.rank_order = order;
                if (space.for_runtime && !runtime::runtime_runs(m, p)) continue;  // what train would refuse
                out.push_back(p);
              }
            }
        }
      }
      }
    }
  }
  return out;
}

}  // namespace stagecraft::planner
