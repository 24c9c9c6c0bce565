#include "costmodel/costs.h"
#include "costmodel/overlapped_pair.h"

#include <algorithm>
#include <array>
#include <map>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <numeric>

#include "costmodel/comm.h"
#include "costmodel/shape.h"
#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "costmodel/profile.h"
#include "costmodel/price.h"
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
  if (m.num_layers < S)
    throw InputError("model '" + m.name + "' has num_layers = " + std::to_string(m.num_layers) + ", fewer than the " +
                     std::to_string(S) + " stages of schedule '" + p.schedule +
                     "' (each stage needs at least one layer: lower pp or chunks)");
  std::vector<int> out(static_cast<size_t>(S), m.num_layers / S);
  int rem = m.num_layers % S;
  // Extra layers go to the middle stages, away from the embedding and the head.
  int start = (S - rem) / 2;
  for (int k = 0; k < rem; ++k) ++out[static_cast<size_t>(start + k)];
  return out;
}

bool recompute_fused_with_backward(const std::vector<schedules::Action>& list, size_t r_index) {
  const schedules::Action& r = list[r_index];
  size_t j = r_index + 1;
  while (j < list.size() && (list[j].op == schedules::Op::SEND_F || list[j].op == schedules::Op::SEND_B)) ++j;
  if (j == list.size()) return false;
  const schedules::Action& b = list[j];
  if (b.op == schedules::Op::B) return b.stage == r.stage && b.microbatch == r.microbatch;
  return b.op == schedules::Op::OVERLAP_F_B && b.b_op == schedules::Op::B && b.b_stage == r.stage && b.b_microbatch == r.microbatch;
}

double recomputed_layer_share(const StageCost& sc, double f) {
  return sc.layers > 0 ? std::round(f * sc.layers) / sc.layers : f;
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

namespace {

// Measured time of an all-reduce (or p2p) on an intra-node link, else the analytic one.
double comm_s(const Profile* prof, const char* op, int ranks, double bytes, const Link& link, double analytic_s,
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

}  // namespace

int checkpoints_per_layer(schedules::TpOverlap mode, int t) { return schedules::tp_overlap_fine_grained(mode) && t > 1 ? 2 : 1; }

LayerSavedBytes layer_saved_bytes(const ModelSpec& m, int b, int t, bool sp, bool selective, schedules::TpOverlap mode,
                                  int moe_tp) {
  LayerSavedBytes l;
  l.act_bytes = selective ? memory::layer_activation_selective_bytes(m, b, t, sp, moe_tp)
                          : memory::layer_activation_bytes(m, b, t, sp, moe_tp);
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

void set_boundary_transfers(StageCost& sc, const Schedule& s, int stage, const Topology& topo, double out_bytes, double in_bytes,
                            const Profile* prof, std::vector<std::string>& notes) {
  if (int nx = s.next_stage(stage); nx >= 0) {
    const Link l = topo.p2p_link(s.rank_of(stage), s.rank_of(nx));
    sc.send_f_bytes = l.kind == "self" ? 0 : out_bytes;
    sc.send_f_s = comm_s(prof, "p2p", 2, out_bytes, l, p2p_s(out_bytes, l), notes);
  }
  if (int pv = s.prev_stage(stage); pv >= 0) {
    const Link l = topo.p2p_link(s.rank_of(stage), s.rank_of(pv));
    sc.send_b_bytes = l.kind == "self" ? 0 : in_bytes;
    sc.send_b_s = comm_s(prof, "p2p", 2, in_bytes, l, p2p_s(in_bytes, l), notes);
  }
}

namespace {
// One sub-batch's pass of a stage's layers by kind (price.h block_kinds): `forward` f, else the
// full backward (i and w); nd dense and nm MoE layers, the head on the last stage; the attention
// core's kernels (in the attention blocks already, the recomputed forward with selective
// recomputation) counted as attention, the rest as products and memory-bound work. The
// communication the pass waits for is the caller's (scaled_kinds).
PassKinds layer_pass_kinds(const LayerWork& lw, bool forward, bool selective, double nd, double nm, bool last,
                           const ClusterSpec& c, const KernelStack& k) {
  auto kinds = [&](const BlockWork& b) { return block_kinds(b, lw, c, k); };
  BlockKinds all, core;
  auto add = [&](BlockKinds& into, std::initializer_list<const BlockWork*> blocks, double times) {
    for (const BlockWork* b : blocks) into.add(kinds(*b), times);
  };
  if (forward) {
    add(all, {&lw.attn_f, &lw.mlp_f}, nd);
    add(all, {&lw.attn_f, &lw.moe_f}, nm);
    if (last) add(all, {&lw.head_f}, 1);
    add(core, {&lw.core.f}, nd + nm);
  } else {
    add(all, {&lw.attn_i, &lw.attn_w, &lw.mlp_i, &lw.mlp_w}, nd);
    add(all, {&lw.attn_i, &lw.attn_w, &lw.moe_i, &lw.moe_w}, nm);
    if (last) add(all, {&lw.head_i, &lw.head_w}, 1);
    add(core, {&lw.core.i}, nd + nm);
    if (selective) add(core, {&lw.core.f}, nd + nm);
  }
  PassKinds out;
  out.attention_core_s = core.total_s() + std::max(0.0, all.flash_s - core.flash_s);
  out.products_s = std::max(0.0, all.products_s - core.products_s);
  out.memory_s = std::max(0.0, all.memory_s - core.memory_s);
  return out;
}

// A pass of `duration_s`, of which `comm_s` waits for communication, the rest split in the
// shares of `shape` (its compute by kind).
PassKinds scaled_kinds(const PassKinds& shape, double duration_s, double comm_s) {
  PassKinds out;
  out.comm_s = std::min(std::max(0.0, comm_s), duration_s);
  const double compute = shape.products_s + shape.attention_core_s + shape.memory_s, rest = duration_s - out.comm_s;
  if (compute <= 0) return out;
  out.products_s = rest * shape.products_s / compute;
  out.attention_core_s = rest * shape.attention_core_s / compute;
  out.memory_s = rest * shape.memory_s / compute;
  return out;
}

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
    sc.reduce_grad_s += comm_s(prof, "reduce_scatter", edp, bytes, path.flat, reduce_scatter_s(bytes, path), notes);
    sc.reduce_grad_latency_s += allreduce_latency_s(bytes, path, /*tree_allowed=*/false) / 2;
  } else {
    sc.reduce_grad_s += comm_s(prof, "all_reduce", edp, bytes, path.flat, allreduce_s(bytes, path), notes);
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
  if (p.zero == 3) {
    // Fully sharded: each backward reduce-scatters its units (set_fsdp); hybrid sharding
    // all-reduces each shard once more over the copies that hold it.
    const int shard = shard_degree(p), copies = dp_ranks / shard;
    const AllReducePath replicas = topo.allreduce_path(kDpCp, copies, shard);
    const double shard_bytes = bytes / shard;
    sc.reduce_grad_s = copies > 1 ? comm_s(prof, "all_reduce", copies, shard_bytes, replicas.flat, allreduce_s(shard_bytes, replicas), notes) : 0;
    sc.reduce_grad_latency_s = copies > 1 ? allreduce_latency_s(shard_bytes, replicas) : 0;
  } else if (p.zero >= 1) {
    // Distributed optimizer: the gradients are reduce-scattered over the dp group (Megatron-LM
    // distributed optimizer; ZeRO, Rajbhandari et al. SC20), the parameters all-gathered after
    // the step (CostTable::param_gather_s).
    sc.reduce_grad_s = comm_s(prof, "reduce_scatter", dp_ranks, bytes, dp_link, reduce_scatter_s(bytes, dp_path), notes);
    sc.reduce_grad_latency_s = allreduce_latency_s(bytes, dp_path, /*tree_allowed=*/false) / 2;
  } else if (s.num_chains == 1) {
    sc.reduce_grad_s = comm_s(prof, "all_reduce", dp_ranks, bytes, dp_link, allreduce_s(bytes, dp_path), notes);
    sc.reduce_grad_latency_s = allreduce_latency_s(bytes, dp_path);
  } else {
    const Link link = chain_reduce_link(s, stage, topo, dp_link);
    const int n = p.dp * s.num_chains;
    sc.reduce_grad_s = ring_allreduce_s(bytes, n, link);
    sc.reduce_grad_latency_s = sc.reduce_grad_s > 0 ? 2.0 * (n - 1) * link.latency_s : 0;
  }
  add_expert_grad_reduction(sc, topo, p, prof, notes);
}

void set_fsdp(StageCost& sc, const ModelSpec& m, const ParallelPlan& p, const Topology& topo, bool first, bool last,
              const Profile* prof, std::vector<std::string>& notes) {
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
    return shard > 1 ? comm_s(prof, "all_gather", shard, bytes, path.flat, all_gather_s(bytes, path), notes) : 0.0;
  };
  auto scatter = [&](double bytes) {
    return shard > 1 ? comm_s(prof, "reduce_scatter", shard, bytes, path.flat, reduce_scatter_s(bytes, path), notes) : 0.0;
  };
  sc.fsdp = fsdp_stage(units, m, p.reshard_after_forward, gather, scatter);
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
    } else if (m.fp8 && r < t.fp8_params.size()) {  // every replica casts its whole weights (not 1/dp)
      t.static_bytes[r] += t.fp8_params[r] * fp8_weight_copy_bytes(m);  // the recipe's copies (specs.h)
      t.optimizer_s[r] += shape::memory_s(c, t.fp8_params[r] * fp8_weight_cast_bytes(m));
    }
    if (gathers_after_step(p)) {
      const double bytes = params * m.bytes_per_param;  // (params) the rank's updated 16-bit weights
      const double expert_bytes = experts * m.bytes_per_param;  // the routed experts', over their own groups
      const AllReducePath expert_path = topo.allreduce_path(expert_axis(p), expert_data_parallel(p), p.ep);
      t.param_gather_bytes[r] = bytes + expert_bytes;
      t.param_gather_s[r] = comm_s(prof, "all_gather", shard, bytes, topo.group_link(kDpCp), all_gather_s(bytes, topo.allreduce_path(kDpCp)), t.notes);
      if (expert_shard > 1)
        t.param_gather_s[r] += comm_s(prof, "all_gather", expert_shard, expert_bytes, expert_path.flat,
                                      all_gather_s(expert_bytes, expert_path), t.notes);
      t.param_gather_head_share[r] = param_gather_head_share(p, t.params[r] * grad_bytes_per_param(m));
    }
  }
}

CostTable analytic_cost_table(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Schedule& s,
                              const Profile* prof) {
  check_fit(m, c, p);
  if (p.cp > 1 && prof)
    throw InputError("plan.cp = " + std::to_string(p.cp) + " with a measured profile: the profile's layers ran whole "
                     "sequences, not a ring of chunks (allowed: cp = 1 with --profile, or the analytic costs)");
  const ModelSpec ms = cp_rank_model(m, p.cp);  // the tokens one rank holds: s / cp per sample (cp.h)
  if (s.num_ranks != p.pp)
    throw InputError("schedule '" + s.name + "' has " + std::to_string(s.num_ranks) + " ranks but plan.pp = " +
                     std::to_string(p.pp));
  const int S = s.stages_per_chain();
  std::vector<int> layers = partition_layers(m, p, S);
  Topology topo(c, p);
  const int b = p.microbatch_size, t = p.tp;
  const KernelStack& stack = load_stack(p.stack);
  const Link tp_link = topo.group_link(kTp);
  CostTable table;
  std::vector<std::string> notes;
  if (!p.stage_tp_overlap.empty() && static_cast<int>(p.stage_tp_overlap.size()) != S)
    throw InputError("plan.stage_tp_overlap has " + std::to_string(p.stage_tp_overlap.size()) +
                     " entries; the schedule has " + std::to_string(S) + " stages per pipeline");
  if (p.zero >= 1 && s.num_chains > 1)
    throw InputError("plan.zero = " + std::to_string(p.zero) + " is not supported with schedule '" + s.name +
                     "' (its " + std::to_string(s.num_chains) + " chains reduce copies of a stage jointly); use zero 0");
  const bool sp = p.sequence_parallel;
  // One tp collective over `bb` samples: a ring all-reduce of (bb, s, h); with sequence
  // parallelism an all-gather and a reduce-scatter of the same buffer in its place
  // (Korthikanti et al., MLSys 2023), measured ones where the profile has both.
  auto tp_collective_s = [&](int bb) {
    const double bytes = memory::tp_allreduce_bytes(ms, 1) * bb;
    double ar = comm_s(prof, "all_reduce", t, bytes, tp_link, ring_allreduce_s(bytes, t, tp_link), notes);
    if (!sp) return ar;
    std::vector<std::string> sp_notes;
    double ag = comm_s(prof, "all_gather", t, bytes, tp_link, -1, sp_notes);
    double rs = comm_s(prof, "reduce_scatter", t, bytes, tp_link, -1, sp_notes);
    if (ag < 0 || rs < 0) return ar;
    notes.insert(notes.end(), sp_notes.begin(), sp_notes.end());
    return ag + rs;
  };
  // The vocabulary-parallel ends' collectives (Megatron-LM's VocabParallelEmbedding and
  // vocab-parallel cross-entropy; runtime/model.cpp), blocking inside the end pieces as both run
  // them: the embedding's all-reduce of (bb, s, h) in its forward (with sequence parallelism a
  // reduce-scatter, half of comm_s); the head input's gradient all-reduce in its backward (with
  // sequence parallelism an all-gather forward and a reduce-scatter backward); the loss's two
  // all-reduces of its row maxima, (bb s) fp32, and exponent sums with target logits, (bb s, 2).
  // Not in tp_comm_f_s / tp_allreduces_f, which count the blocks' collectives of one size.
  auto add_vocab_parallel_ends = [&](InnerCosts& ic, int bb) {
    const double rows_bytes = 4.0 * bb * ms.seq_length;  // (bb s) fp32
    const double loss_s = comm_s(prof, "all_reduce", t, rows_bytes, tp_link, ring_allreduce_s(rows_bytes, t, tp_link), notes) +
                          comm_s(prof, "all_reduce", t, 2 * rows_bytes, tp_link, ring_allreduce_s(2 * rows_bytes, t, tp_link), notes);
    const double part = sp ? ic.comm_s / 2 : ic.comm_s;
    if (ic.embedding) ic.embed_f_s += part;
    if (ic.head) {
      ic.head_f_s += loss_s + (sp ? part : 0);
      ic.head_i_s += part;
    }
  };
  const double msg_bytes = memory::boundary_message_bytes(ms, b, t, sp);
  const bool selective = p.recompute == RecomputePolicy::Selective;

  table.stages.resize(static_cast<size_t>(s.num_stages));
  // Measured costs, when profiled, at the microbatch size of a sub-batch of each mode.
  std::map<int, std::array<LayerCost, 3>> measured;  // sub-batch samples -> transformer, head, embedding
  auto measured_at = [&](int bb) -> const std::array<LayerCost, 3>& {
    auto it = measured.find(bb);
    if (it != measured.end()) return it->second;
    std::array<LayerCost, 3> lc{profiled_layer(*prof, "transformer", m, bb, t), profiled_layer(*prof, "head", m, bb, t),
                                profiled_layer(*prof, "embedding", m, bb, t)};
    for (const LayerCost& x : lc)
      if (x.extrapolated) notes.push_back(x.note);
    return measured.emplace(bb, lc).first->second;
  };
  table.params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  table.fp8_params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  table.expert_params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  const AllReducePath ep_path = topo.allreduce_path(expert_axis(p), p.ep, 1);  // the expert-parallel groups (moe.h)
  const int et = expert_tp(p);
  for (int st = 0; st < s.num_stages; ++st) {
    StageCost& sc = table.stages[static_cast<size_t>(st)];
    const int part = s.model_part(st);
    const double n = layers[static_cast<size_t>(part)];
    int first_layer = 0;  // the part's first transformer layer in the model
    for (int q = 0; q < part; ++q) first_layer += layers[static_cast<size_t>(q)];
    const int nm = moe_layers_in(m, first_layer, static_cast<int>(n)), nd = static_cast<int>(n) - nm;
    const bool first = s.is_first(st), last = s.is_last(st);
    sc.layers = static_cast<int>(n);
    sc.weight = n * s.num_ranks / m.num_layers;
    // The stage's pieces (inner.h): per-block compute and one collective, for one sub-batch.
    const schedules::TpOverlap mode = p.overlap_of(part);
    const int sb = t > 1 ? schedules::tp_overlap_sub_batches(mode) : 1;
    const int bb = b / sb;  // samples of a sub-batch (check_tp_overlap: b is even when split)
    InnerCosts& ic = sc.inner;
    ic.mode = mode;
    ic.sub_batches = sb;
    ic.layers = sc.layers;
    ic.embedding = first;
    ic.head = last;
    const double attn_mm = flops::attention_block_matmul_flops(m, bb), core = flops::layer_attention_forward_flops(m, bb);
    const double mlp = flops::mlp_block_forward_flops(m, bb);
    PassKinds shape_f, shape_b;  // one sub-batch's passes by kind, before the durations scale them
    if (!prof) {
      // The layer's work (workload.h) priced by shape or at the flat rate (price.h).
      const LayerWork lw = layer_work(m, stack, bb, t, sp, selective, p.cp, p.ep, et);
      shape_f = layer_pass_kinds(lw, true, selective, nd, nm, last, c, stack);
      shape_b = layer_pass_kinds(lw, false, selective, nd, nm, last, c, stack);
      LayerTimes lt = price_layer(lw, c, stack, &notes);
      if (nm > 0) {
        // An MoE layer's MLP block waits for its all-to-alls and tp collectives (moe.h); the
        // stage's MLP pieces take the mean of its dense and MoE layers (the inner schedules of
        // experts run blocking, so the sums are exact).
        sc.moe.moe_layers = nm;
        sc.moe.layer = moe_layer(ms, bb, t, p.ep, et, ep_path, tp_link);
        const double dn = nd, mn = nm;
        auto mean = [&](double dense_s, double moe_s) { return (dn * dense_s + mn * moe_s) / n; };
        lt.mlp_f_s = mean(lt.mlp_f_s, lt.moe_f_s + sc.moe.layer.exposed_f_s);
        lt.mlp_i_s = mean(lt.mlp_i_s, lt.moe_i_s + sc.moe.layer.exposed_b_s);
        lt.mlp_w_s = mean(lt.mlp_w_s, lt.moe_w_s);
        sc.moe.exposed_f_s = sb * mn * sc.moe.layer.exposed_f_s;
        sc.moe.exposed_b_s = sb * mn * sc.moe.layer.exposed_b_s;
      }
      ic.attn_f_s = lt.attn_f_s;
      ic.mlp_f_s = lt.mlp_f_s;
      ic.attn_i_s = lt.attn_i_s;
      ic.mlp_i_s = lt.mlp_i_s;
      ic.attn_w_s = lt.attn_w_s;
      ic.mlp_w_s = lt.mlp_w_s;
      ic.attn_r_s = ic.attn_f_s;
      ic.mlp_r_s = ic.mlp_f_s;
      ic.head_f_s = last ? lt.head_f_s : 0;
      ic.head_i_s = last ? lt.head_i_s : 0;
      ic.head_w_s = last ? lt.head_w_s : 0;
      if (p.cp > 1) {  // the ring of key/value chunks beside the core's kernels (cp.h)
        sc.cp = cp_layer(m, bb, t, p.cp, block_s(lw.core.f, lw, c, stack, &notes), block_s(lw.core.i, lw, c, stack, &notes),
                         topo.group_link(kCp));
        ic.attn_f_s += sc.cp.exposed_f_s;
        ic.attn_r_s += sc.cp.exposed_f_s;
        ic.attn_i_s += sc.cp.exposed_b_s;
      }
    } else {
      if (is_moe(m))
        throw InputError("model '" + m.name + "' has experts and a measured profile: the profiler measures dense layers "
                         "(allowed: the analytic costs for MoE models)");
      // Measured shards at this tp and sub-batch size (profiler/layers.h), split into the two
      // blocks by their FLOP shares; the collectives come from tp_collective_s.
      const auto& [layer_m, head_m, embed_m] = measured_at(bb);
      const double fa = (attn_mm + core) / (attn_mm + core + mlp), wa = attn_mm / (attn_mm + mlp);
      const double ia = (attn_mm + 2 * core) / (attn_mm + 2 * core + mlp);  // I repeats the core twice (flops.h)
      ic.attn_f_s = layer_m.f_s * fa;
      ic.mlp_f_s = layer_m.f_s * (1 - fa);
      ic.attn_i_s = layer_m.i_s * ia + (selective ? ic.attn_f_s * core / (attn_mm + core) : 0);
      ic.mlp_i_s = layer_m.i_s * (1 - ia);
      ic.attn_w_s = layer_m.w_s * wa;
      ic.mlp_w_s = layer_m.w_s * (1 - wa);
      ic.attn_r_s = layer_m.r_s * fa;
      ic.mlp_r_s = layer_m.r_s * (1 - fa);
      ic.head_f_s = last ? head_m.f_s : 0;
      ic.head_i_s = last ? head_m.i_s : 0;
      ic.head_w_s = last ? head_m.w_s : 0;
      ic.embed_f_s = first ? embed_m.f_s : 0;
      ic.embed_b_s = first ? embed_m.b_s : 0;
    }
    ic.comm_bytes = t > 1 ? memory::tp_allreduce_bytes(ms, 1) * bb : 0;
    ic.comm_s = t > 1 ? tp_collective_s(bb) : 0;
    if (mode == schedules::TpOverlap::Te) {
      // Transformer Engine's userbuffers: each collective in t chunks (one per ring step), its
      // kernels holding the stack's SMs while they run beside a GEMM (stack.h).
      ic.comm_chunks = t;
      const int k = stack.tp_overlap_comm_sms;
      if (k < 1)
        throw InputError("plan.tp_overlap = te needs a stack that runs Transformer Engine's overlap; stack '" + stack.name +
                         "' has tp_overlap_comm_sms = 0 (allowed: a stack with it, e.g. megatron-core-te)");
      ic.comm_sm_slowdown = c.gpu_sms > k && k > 0 ? static_cast<double>(k) / (c.gpu_sms - k) : 0;
    }
    if (t > 1) add_vocab_parallel_ends(ic, bb);
    if (sc.layers > 0) {
      InnerDurations d = inner_durations(ic);
      sc.f_s = d.f_s;
      sc.b_s = d.b_s;
      sc.i_s = d.i_s;
      sc.w_s = d.w_s;
      sc.r_s = d.r_s;
      sc.tp_exposed_f_s = d.exposed_comm_f_s;
      sc.tp_exposed_b_s = d.exposed_comm_b_s;
      // The durations by kind: what the pass waits for, and its compute in the work's shares.
      const double ring = n * sb, moe_f = sc.moe.exposed_f_s, moe_b = sc.moe.exposed_b_s;
      sc.kinds_f = scaled_kinds(shape_f, sc.f_s, sc.tp_exposed_f_s + ring * sc.cp.exposed_f_s + moe_f);
      sc.kinds_b = scaled_kinds(shape_b, sc.b_s, sc.tp_exposed_b_s + ring * sc.cp.exposed_b_s + moe_b);
    }
    const int per_action = t > 1 ? static_cast<int>(2 * n) * sb : 0;  // collectives of one F (and one I)
    sc.tp_allreduces_f = per_action;
    sc.tp_allreduces_i = per_action;
    sc.tp_allreduce_bytes = ic.comm_bytes;
    sc.tp_comm_f_s = per_action * ic.comm_s;
    sc.tp_comm_i_s = sc.tp_comm_f_s;
    // Point-to-point at the stage's boundaries, and the parameters' data-parallel reduction.
    set_boundary_transfers(sc, s, st, topo, msg_bytes, msg_bytes, prof, table.notes);
    const memory::MoeLayerParams lp = memory::layers_params_per_rank(m, first_layer, static_cast<int>(n), t, p.ep, et);
    double params = lp.dense + (first ? memory::embedding_params_per_rank(m, t) : 0) + (last ? memory::head_params_per_rank(m, t) : 0);
    const size_t rank = static_cast<size_t>(s.rank_of(st));
    table.params[rank] += params;
    sc.moe.expert_params = lp.experts;
    table.expert_params[rank] += sc.moe.expert_params;
    if (m.fp8) table.fp8_params[rank] += lp.linear;
    sc.grad_bytes = params * grad_bytes_per_param(m);  // (params) one GPU's gradients
    sc.expert_grad_bytes = sc.moe.expert_params * grad_bytes_per_param(m);
    set_grad_reduction(sc, s, st, topo, p, prof, table.notes);
    // Activations.
    // Activations: what every sub-batch keeps (Korthikanti's formulas are linear in b, so the
    // sub-batches add up to the microbatch). Oases' fine-grained recomputation keeps each
    // block's input (the output of the collective before it): two checkpoints per layer.
    const LayerSavedBytes layer = layer_saved_bytes(ms, bb, t, sp, selective, mode);
    const LayerSavedBytes moe_layer_bytes = nm > 0 ? layer_saved_bytes(ms, bb, t, sp, selective, mode, et) : LayerSavedBytes{};
    double extra = (first ? memory::embedding_activation_bytes(ms, bb, t, sp) : 0) +
                   (last ? memory::head_activation_bytes(ms, bb, t, sp) : 0);
    sc.act_bytes = sb * (nd * layer.act_bytes + nm * moe_layer_bytes.act_bytes + extra);
    sc.ckpt_bytes = sb * (nd * layer.ckpt_bytes + nm * moe_layer_bytes.ckpt_bytes + extra);
    // A backward's working set comes on top of everything held: the head's first on the last
    // stage, then one layer's at a time (the layers behind it already freed), so the larger.
    sc.work_bytes = sb * std::max({nd > 0 ? memory::layer_backward_working_bytes(ms, bb, t, sp) : 0.0,
                                   nm > 0 ? memory::layer_backward_working_bytes(ms, bb, t, sp, et) : 0.0,
                                   last ? memory::head_backward_working_bytes(ms, bb, t, sp) : 0.0});
    sc.work_bytes += sb * 8 * sc.cp.chunk_bytes;  // the ring's K, V and, backward, dK, dV: in use and arriving
    sc.w_kept_bytes = sb * (nd * memory::layer_weight_kept_bytes(ms, bb, t, sp) +
                            nm * memory::layer_weight_kept_bytes(ms, bb, t, sp, et) +
                            (last ? memory::head_weight_kept_bytes(ms, bb, t, sp) : 0));
    const bool measured_bytes = prof && !sp && (!selective || measured_at(bb)[0].selective_activation_bytes > 0);
    if (measured_bytes) {
      const auto& [layer_m, head_m, embed_m] = measured_at(bb);
      // Selective recomputation: the layer's bytes with its attention core recomputed.
      const double layer_x = selective ? layer_m.selective_activation_bytes : layer_m.activation_bytes;
      const double layer_work = selective ? layer_m.selective_backward_working_bytes : layer_m.backward_working_bytes;
      double head_x = last ? head_m.activation_bytes : 0, embed_x = first ? embed_m.activation_bytes : 0;
      // A layer's measured bytes hold its output, not its input (the profiler's input existed
      // before): a stage's first layer reads the embedding's output, or else the received
      // input, one checkpoint's bytes, kept as well.
      const double input_x = first ? 0 : layer_m.checkpoint_bytes;
      sc.act_bytes = sb * (n * layer_x + head_x + embed_x + input_x);
      sc.ckpt_bytes = sb * (n * checkpoints_per_layer(mode, t) * layer_m.checkpoint_bytes + head_x + embed_x);
      if (layer_work > 0 && (!last || head_m.backward_working_bytes > 0))
        sc.work_bytes = sb * std::max(n > 0 ? layer_work : 0.0, last ? head_m.backward_working_bytes : 0.0);
      if (layer_m.weight_kept_bytes > 0 && (!last || head_m.weight_kept_bytes > 0))
        sc.w_kept_bytes = sb * (n * layer_m.weight_kept_bytes + (last ? head_m.weight_kept_bytes : 0));
    }
    sc.offload_s = sc.act_bytes / c.host_link_bandwidth_Bps;
    sc.reload_s = sc.offload_s;
    if (p.zero == 3) set_fsdp(sc, m, p, topo, first, last, prof, table.notes);
    set_overlapped_pair(sc, c.gpu_sms);
  }
  set_rank_costs(table, m, c, p, topo, prof);
  table.notes.insert(table.notes.end(), notes.begin(), notes.end());
  std::sort(table.notes.begin(), table.notes.end());
  table.notes.erase(std::unique(table.notes.begin(), table.notes.end()), table.notes.end());
  return table;
}

}  // namespace stagecraft::costmodel
