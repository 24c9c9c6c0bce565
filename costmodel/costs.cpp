#include "costmodel/costs.h"
#include "costmodel/overlapped_pair.h"

#include <algorithm>
#include <array>
#include <map>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <numeric>
#include <tuple>

#include "costmodel/comm.h"
#include "costmodel/shape.h"
#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "costmodel/pipeline_split.h"
#include "costmodel/profile.h"
#include "costmodel/price.h"
#include "costmodel/plan_workload.h"
#include "costmodel/workload.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {

using schedules::Schedule;

UnitCosts parse_unit_costs(const std::string& text) {
  UnitCosts u;
  size_t pos = 0;
  bool b_given = false, iw_given = false;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string kv = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    for (char& ch : key) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (eq == std::string::npos || (key != "F" && key != "B" && key != "I" && key != "W" && key != "R"))
      throw InputError("--unit-costs entry '" + kv + "' is invalid (expected KEY=SECONDS with KEY one of F, B, I, W, R)");
    std::string val = kv.substr(eq + 1);
    char* end = nullptr;
    double v = std::strtod(val.c_str(), &end);
    if (val.empty() || *end != '\0' || !(v >= 0))
      throw InputError("--unit-costs " + key + " = '" + val + "' is invalid (expected a number >= 0)");
    if (key == "F") u.f = v;
    if (key == "B") u.b = v, b_given = true;
    if (key == "I") u.i = v, iw_given = true;
    if (key == "W") u.w = v, iw_given = true;
    if (key == "R") u.r = v;
  }
  if (!b_given && iw_given) u.b = u.i + u.w;  // a full backward is the two halves
  return u;
}

CostTable unit_cost_table(const Schedule& s, const UnitCosts& u) {
  CostTable t;
  double weight = static_cast<double>(s.num_ranks) / s.stages_per_chain();
  StageCost sc;
  sc.f_s = u.f;
  sc.b_s = u.b;
  sc.i_s = u.i;
  sc.w_s = u.w;
  sc.r_s = u.r;
  sc.weight = weight;
  t.stages.assign(static_cast<size_t>(s.num_stages), sc);
  t.optimizer_s.assign(static_cast<size_t>(s.num_ranks), 0.0);
  t.param_gather_s.assign(static_cast<size_t>(s.num_ranks), 0.0);
  t.static_bytes.assign(static_cast<size_t>(s.num_ranks), 0.0);
  t.params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  return t;
}

std::vector<int> partition_layers(const ModelSpec& m, const ParallelPlan& p, int S) {
  if (!p.pipeline_layout.empty()) return layout_stage_layers(p.pipeline_layout, m, S);
  if (p.account_for_embedding || p.account_for_loss) return accounted_stage_layers(m, S, p.account_for_embedding, p.account_for_loss);
  if (!p.stage_layers.empty()) {
    if (static_cast<int>(p.stage_layers.size()) != S)
      throw InputError("plan.stage_layers has " + std::to_string(p.stage_layers.size()) + " entries; the schedule has " +
                       std::to_string(S) + " stages per pipeline");
    int sum = std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), 0);
    if (sum != m.num_layers)
      throw InputError("plan.stage_layers adds up to " + std::to_string(sum) + " layers; model '" + m.name + "' has " +
                       std::to_string(m.num_layers));
    return p.stage_layers;
  }
  if (m.num_layers < S) {
    // Megatron-Core's split with the embedding and the loss counted fits where L + 2 is S (pipeline_split.h).
    const bool counted = m.num_layers + 2 == S;
    throw InputError("model '" + m.name + "' has num_layers = " + std::to_string(m.num_layers) + ", fewer than the " +
                     std::to_string(S) + " stages of schedule '" + p.schedule +
                     "' (each stage needs at least one layer: lower pp or chunks" +
                     (counted ? ", or count the embedding and the loss as layers, as Megatron-Core's "
                                "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split do)"
                              : ")"));
  }
  std::vector<int> out(static_cast<size_t>(S), m.num_layers / S);
  int rem = m.num_layers % S;
  // Extra layers go to the middle stages, away from the embedding and the head.
  int start = (S - rem) / 2;
  for (int k = 0; k < rem; ++k) ++out[static_cast<size_t>(start + k)];
  return out;
}

double recomputed_layer_share(const StageCost& sc, double f) {
  return sc.layers > 0 ? static_cast<double>(schedules::recomputed_layers(f, sc.layers)) / sc.layers : f;
}

double kept_activation_bytes(const StageCost& sc, double f) {
  f = recomputed_layer_share(sc, f);
  return (1 - f) * sc.act_bytes + f * sc.ckpt_bytes;
}

double recompute_activation_bytes(const StageCost& sc, double f, bool fused) {
  f = recomputed_layer_share(sc, f);
  const double all = f * (sc.act_bytes - sc.ckpt_bytes);
  if (!fused || sc.layers <= 0) return all;  // unit costs (no layers): the whole share
  return std::min(all, (sc.act_bytes - sc.ckpt_bytes) / sc.layers);
}

double backward_freed_bytes(const StageCost& sc, double f, bool fused) {
  return fused ? kept_activation_bytes(sc, f) + recompute_activation_bytes(sc, f, true) : sc.act_bytes;
}

double split_input_freed_bytes(const StageCost& sc) { return sc.w_kept_bytes < 0 ? 0.0 : sc.act_bytes - sc.w_kept_bytes; }

double split_weight_freed_bytes(const StageCost& sc) { return sc.w_kept_bytes < 0 ? sc.act_bytes : sc.w_kept_bytes; }

Link chain_reduce_link(const Schedule& s, int stage, const Topology& topo, const Link& dp_link) {
  Link link = dp_link;
  for (int c = 0; c < s.num_chains; ++c) {
    int copy = c * s.stages_per_chain() + s.model_part(stage);
    if (copy == stage) continue;
    Link l = topo.p2p_link(s.rank_of(stage), s.rank_of(copy));
    if (l.kind != "self" && (link.kind == "self" || l.bandwidth_Bps < link.bandwidth_Bps)) link = l;
  }
  return link;
}

double measured_comm_s(const Profile* prof, const char* op, int ranks, double bytes, const Link& link, double analytic_s,
                       std::vector<std::string>& notes) {
  if (!prof || link.kind == "inter-node" || link.kind == "self" || bytes <= 0 || ranks <= 1) return analytic_s;
  bool extra = false;
  double t = profiled_collective_s(*prof, op, ranks, bytes, &extra);
  if (t < 0) {
    notes.push_back(std::string("no measured ") + op + " over " + std::to_string(ranks) + " ranks: analytic");
    return analytic_s;
  }
  if (extra) notes.push_back(std::string(op) + " of " + std::to_string(static_cast<long>(bytes)) + " bytes over " +
                             std::to_string(ranks) + " ranks extrapolated beyond the measured sizes");
  return t;
}

double flow_scale(double measured_s, double analytic_s, double latency_s) {
  if (measured_s == analytic_s || analytic_s <= latency_s) return 1;
  return std::max(0.0, (measured_s - latency_s) / (analytic_s - latency_s));
}

int checkpoints_per_layer(schedules::TpOverlap mode, int t) { return schedules::tp_overlap_fine_grained(mode) && t > 1 ? 2 : 1; }

LayerSavedBytes layer_saved_bytes(const ModelSpec& m, int b, int t, bool sp, bool selective, schedules::TpOverlap mode,
                                  int moe_tp, const RecomputeModules& modules) {
  LayerSavedBytes l;
  l.act_bytes = selective ? memory::layer_activation_selective_bytes(m, b, t, sp, moe_tp)
                          : memory::layer_activation_bytes(m, b, t, sp, moe_tp);
  if (modules.any_beyond_core()) l.act_bytes -= memory::recomputed_module_bytes(m, b, t, sp, moe_tp, modules);
  l.ckpt_bytes = checkpoints_per_layer(mode, t) * memory::layer_checkpoint_bytes(m, b, t, sp);
  return l;
}

double param_gather_head_share(const ParallelPlan& p, double grad_bytes) {
  if (!p.overlap_param_gather || grad_bytes <= 0) return 1.0;
  return std::min(1.0, p.grad_bucket_bytes / grad_bytes);
}

OverlappedPair overlapped_pair(double compute_s, double comm_s, int gpu_sms) {
  const double share = gpu_sms > kDualPipeCommSms ? static_cast<double>(kDualPipeCommSms) / (gpu_sms - kDualPipeCommSms) : 0;
  OverlappedPair p;
  p.compute_s = compute_s;
  p.comm_s = comm_s;
  p.busy_s = compute_s + share * std::min(comm_s, compute_s);
  return p;
}

void set_overlapped_pair(StageCost& sc, int gpu_sms) {
  const double fa = sc.moe.exposed_f_s, ba = sc.moe.exposed_b_s;
  if (fa <= 0 && ba <= 0) return;
  auto pair = [&](double backward_s) { return overlapped_pair(sc.f_s - fa + backward_s - ba, fa + ba, gpu_sms).time_s(); };
  sc.overlap_b_s = pair(sc.b_s) - sc.f_s;
  sc.overlap_i_s = pair(sc.i_s) - sc.f_s;
}

double overlapped_backward_s(const StageCost& sc, schedules::Op op) {
  const double v = op == schedules::Op::I ? sc.overlap_i_s : sc.overlap_b_s;
  return v >= 0 ? v : (op == schedules::Op::I ? sc.i_s : sc.b_s);
}

double optimizer_step_s(const ModelSpec& m, const ClusterSpec& c, double params, int shard) {
  return params * memory::optimizer_traffic_bytes_per_param(m) / c.gpu_memory_bandwidth_Bps / shard;
}

namespace {
// One boundary message from `stage` to `peer` (none when there is no peer): its bytes (0 on the
// same rank), its time on the link between their ranks (measured where profiled) and the
// simulator's flow scale (flow_scale).
struct Send {
  double bytes = 0, time_s = 0, scale = 1;
};
Send price_send(const Schedule& s, int stage, int peer, const Topology& topo, double bytes, const Profile* prof,
                std::vector<std::string>& notes) {
  Send out;
  if (peer < 0) return out;
  const Link l = topo.p2p_link(s.rank_of(stage), s.rank_of(peer));
  const double analytic_s = p2p_s(bytes, l);
  out.bytes = l.kind == "self" ? 0 : bytes;
  out.time_s = measured_comm_s(prof, "p2p", 2, bytes, l, analytic_s, notes);
  out.scale = flow_scale(out.time_s, analytic_s, l.latency_s);
  return out;
}
}  // namespace

void set_boundary_transfers(StageCost& sc, const Schedule& s, int stage, const Topology& topo, double out_bytes, double in_bytes,
                            const Profile* prof, std::vector<std::string>& notes) {
  const Send f = price_send(s, stage, s.next_stage(stage), topo, out_bytes, prof, notes);
  const Send b = price_send(s, stage, s.prev_stage(stage), topo, in_bytes, prof, notes);
  std::tie(sc.send_f_bytes, sc.send_f_s, sc.send_f_scale) = std::tie(f.bytes, f.time_s, f.scale);
  std::tie(sc.send_b_bytes, sc.send_b_s, sc.send_b_scale) = std::tie(b.bytes, b.time_s, b.scale);
}

namespace {
// The routed experts' gradients (StageCost::expert_grad_bytes) over the expert-data-parallel
// groups, dp x cp / ep ranks ep apart (moe.h): an all-reduce, a reduce-scatter with a distributed
// optimizer. Adds to reduce_grad_s and its latency.
void add_expert_grad_reduction(StageCost& sc, const Topology& topo, const ParallelPlan& p, const Profile* prof,
                               std::vector<std::string>& notes) {
  const int edp = expert_data_parallel(p);
  const double bytes = sc.expert_grad_bytes;
  if (bytes <= 0 || edp < 2) return;
  const AllReducePath path = topo.allreduce_path(expert_axis(p), edp, p.ep);
  if (p.zero >= 1) {
    sc.reduce_grad_s += measured_comm_s(prof, "reduce_scatter", edp, bytes, path.flat, reduce_scatter_s(bytes, path), notes);
    sc.reduce_grad_latency_s += allreduce_latency_s(bytes, path, /*tree_allowed=*/false) / 2;
  } else {
    sc.reduce_grad_s += measured_comm_s(prof, "all_reduce", edp, bytes, path.flat, allreduce_s(bytes, path), notes);
    sc.reduce_grad_latency_s += allreduce_latency_s(bytes, path);
  }
}
}  // namespace

void set_grad_reduction(StageCost& sc, const Schedule& s, int stage, const Topology& topo, const ParallelPlan& p,
                        const Profile* prof, std::vector<std::string>& notes) {
  const double bytes = sc.grad_bytes - sc.expert_grad_bytes;  // the experts' apart, on their own groups
  // The gradients' group: dp, and with context parallelism dp x cp (each cp rank holds gradients
  // of its share of the sequence).
  const Link dp_link = topo.group_link(kDpCp);
  const AllReducePath& dp_path = topo.allreduce_path(kDpCp);
  const int dp_ranks = topo.group_size(kDpCp);
  double analytic_s = 0;  // the dense reduction's analytic time, for the simulator's flow_scale
  if (p.zero == 3) {
    // Fully sharded: each backward reduce-scatters its units (set_fsdp); hybrid sharding
    // all-reduces each shard once more over the copies that hold it.
    const int shard = shard_degree(p), copies = dp_ranks / shard;
    const AllReducePath replicas = topo.allreduce_path(kDpCp, copies, shard);
    const double shard_bytes = bytes / shard;
    analytic_s = copies > 1 ? allreduce_s(shard_bytes, replicas) : 0;
    sc.reduce_grad_s =
        copies > 1 ? measured_comm_s(prof, "all_reduce", copies, shard_bytes, replicas.flat, analytic_s, notes) : 0;
    sc.reduce_grad_latency_s = copies > 1 ? allreduce_latency_s(shard_bytes, replicas) : 0;
  } else if (p.zero >= 1) {
    // Distributed optimizer: the gradients are reduce-scattered over the dp group (Megatron-LM
    // distributed optimizer; ZeRO, Rajbhandari et al. SC20), the parameters all-gathered after
    // the step (CostTable::param_gather_s).
    analytic_s = reduce_scatter_s(bytes, dp_path);
    sc.reduce_grad_s = measured_comm_s(prof, "reduce_scatter", dp_ranks, bytes, dp_link, analytic_s, notes);
    sc.reduce_grad_latency_s = allreduce_latency_s(bytes, dp_path, /*tree_allowed=*/false) / 2;
  } else if (s.num_chains == 1) {
    analytic_s = allreduce_s(bytes, dp_path);
    sc.reduce_grad_s = measured_comm_s(prof, "all_reduce", dp_ranks, bytes, dp_link, analytic_s, notes);
    sc.reduce_grad_latency_s = allreduce_latency_s(bytes, dp_path);
  } else {
    const Link link = chain_reduce_link(s, stage, topo, dp_link);
    const int n = p.dp * s.num_chains;
    analytic_s = sc.reduce_grad_s = ring_allreduce_s(bytes, n, link);
    sc.reduce_grad_latency_s = sc.reduce_grad_s > 0 ? 2.0 * (n - 1) * link.latency_s : 0;
  }
  sc.reduce_grad_scale = flow_scale(sc.reduce_grad_s, analytic_s, sc.reduce_grad_latency_s);
  add_expert_grad_reduction(sc, topo, p, prof, notes);
}

void set_fsdp(StageCost& sc, const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Topology& topo, bool first,
              bool last, const Profile* prof, std::vector<std::string>& notes) {
  if (sc.layers < 1)
    throw InputError("plan.zero = 3 shards by layers; a stage with " + std::to_string(sc.layers) +
                     " layers (unit costs) has none to gather");
  const InnerCosts& ic = sc.inner;
  const double sb = ic.sub_batches, n = sc.layers;
  FsdpUnitWork embed{memory::embedding_params_per_rank(m, p.tp), sb * ic.embed_f_s, sb * ic.embed_b_s, sb * ic.embed_b_s, 0};
  FsdpUnitWork head{memory::head_params_per_rank(m, p.tp), sb * ic.head_f_s, sb * (ic.head_i_s + ic.head_w_s),
                    sb * ic.head_i_s, sb * ic.head_w_s};
  if (!first) embed = {};
  if (!last) head = {};
  const FsdpUnitWork layer{memory::layer_params_per_rank(m, p.tp), (sc.f_s - embed.f_s - head.f_s) / n,
                           (sc.b_s - embed.b_s - head.b_s) / n, (sc.i_s - embed.i_s - head.i_s) / n,
                           (sc.w_s - embed.w_s - head.w_s) / n, m.fp8 ? memory::layer_linear_params_per_rank(m, p.tp) : 0};
  std::vector<FsdpUnitWork> units;
  if (first) units.push_back(embed);
  units.insert(units.end(), static_cast<size_t>(n), layer);
  if (last) units.push_back(head);
  const int shard = shard_degree(p);
  const AllReducePath path = topo.allreduce_path(kDpCp, shard, 1);
  auto gather = [&](double bytes) {
    return shard > 1 ? measured_comm_s(prof, "all_gather", shard, bytes, path.flat, all_gather_s(bytes, path), notes) : 0.0;
  };
  auto scatter = [&](double bytes) {
    return shard > 1 ? measured_comm_s(prof, "reduce_scatter", shard, bytes, path.flat, reduce_scatter_s(bytes, path), notes) : 0.0;
  };
  sc.fsdp = fsdp_stage(units, m, p.reshard_after_forward, gather, scatter, m.fp8 ? fp8_weight_copy_bytes(m, c) : 2);
  sc.f_s += sc.fsdp.exposed_f_s;
  sc.b_s += sc.fsdp.exposed_b_s;
  sc.i_s += sc.fsdp.exposed_i_s;
  sc.w_s += sc.fsdp.exposed_w_s;
  sc.work_bytes += sc.fsdp.gathered_bytes;
}

void set_rank_costs(CostTable& t, const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Topology& topo,
                    const Profile* prof) {
  const size_t R = t.params.size();
  t.optimizer_s.assign(R, 0.0);
  t.param_gather_s.assign(R, 0.0);
  t.param_gather_bytes.assign(R, 0.0);
  t.param_gather_head_share.assign(R, 1.0);
  t.static_bytes.assign(R, 0.0);
  const int shard = shard_degree(p);  // the optimizer steps 1/shard of the parameters
  const int expert_shard = p.zero >= 1 ? expert_data_parallel(p) : 1;  // the routed experts' (moe.h)
  for (size_t r = 0; r < R; ++r) {
    const double experts = r < t.expert_params.size() ? t.expert_params[r] : 0.0;
    const double params = t.params[r] - experts;  // (params) reduced and sharded over dp x cp
    t.static_bytes[r] = params * memory::static_bytes_per_param(m, p.zero, shard) +
                        experts * memory::static_bytes_per_param(m, p.zero, expert_shard);
    // Zero 3 without resharding after the forward: the rank's units stay gathered (16-bit) from
    // their first forward to their last backward, every microbatch of a pipeline overlapping.
    if (p.zero == 3 && !p.reshard_after_forward) t.static_bytes[r] += params * m.bytes_per_param;
    t.optimizer_s[r] = prof && prof->optimizer_s_per_param > 0
                           ? params * prof->optimizer_s_per_param / shard + experts * prof->optimizer_s_per_param / expert_shard
                           : optimizer_step_s(m, c, params, shard) + optimizer_step_s(m, c, experts, expert_shard);
    if (m.fp8 && r < t.fp8_params.size() && p.zero == 3) {  // FP8 parameter all-gather (fsdp.h)
      t.static_bytes[r] -= t.fp8_params[r] * (m.bytes_per_param - 1) / shard;  // the shards kept in FP8
      t.optimizer_s[r] += shape::memory_s(c, t.fp8_params[r] / shard * memory::kFp8ShardCastTrafficBytes);
    } else if (m.fp8 && r < t.fp8_params.size() && p.fp8_param_gather) {  // FP8 compute weights only (specs.h)
      t.static_bytes[r] += t.fp8_params[r] * (fp8_weight_copy_bytes(m, c) - m.bytes_per_param);  // no 16-bit copy
      // Each rank quantises its updated shard from the fp32 master: read 4, write the copies.
      t.optimizer_s[r] += shape::memory_s(c, t.fp8_params[r] / shard * (4 + fp8_weight_copy_bytes(m, c)));
    } else if (m.fp8 && r < t.fp8_params.size()) {  // every replica casts its whole weights (not 1/dp)
      t.static_bytes[r] += t.fp8_params[r] * fp8_weight_copy_bytes(m, c);  // the recipe's copies (specs.h)
      t.optimizer_s[r] += shape::memory_s(c, t.fp8_params[r] * fp8_weight_cast_bytes(m, c));
    }
    if (gathers_after_step(p)) {
      // (params) the rank's updated weights, 16-bit, or with fp8_param_gather its FP8 matrices' copies
      // (the FP8 share taken alike in the dense and the expert parts)
      const double fp8_share = p.fp8_param_gather && r < t.fp8_params.size() ? t.fp8_params[r] / t.params[r] : 0.0;
      const double per_param = (1 - fp8_share) * m.bytes_per_param + fp8_share * (m.fp8 ? fp8_weight_gather_bytes(m, c) : 0.0);
      const double bytes = params * per_param;
      const double expert_bytes = experts * per_param;  // the routed experts', over their own groups
      const AllReducePath expert_path = topo.allreduce_path(expert_axis(p), expert_data_parallel(p), p.ep);
      t.param_gather_bytes[r] = bytes + expert_bytes;
      t.param_gather_s[r] = measured_comm_s(prof, "all_gather", shard, bytes, topo.group_link(kDpCp), all_gather_s(bytes, topo.allreduce_path(kDpCp)), t.notes);
      if (expert_shard > 1)
        t.param_gather_s[r] += measured_comm_s(prof, "all_gather", expert_shard, expert_bytes, expert_path.flat,
                                      all_gather_s(expert_bytes, expert_path), t.notes);
      t.param_gather_head_share[r] = param_gather_head_share(p, t.params[r] * grad_bytes_per_param(m));
    }
  }
}

CostTable analytic_cost_table(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Schedule& s,
                              const Profile* prof) {
  return price(build_plan_workload(m, c, p, s), c, s, prof);
}

}  // namespace stagecraft::costmodel
