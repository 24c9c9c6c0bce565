#include "costmodel/costs.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <numeric>

#include "costmodel/comm.h"
#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "costmodel/profile.h"
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

namespace {

// Gradient all-reduce of one stage: over its data-parallel group, and with several chains
// (Chimera) over the copies of the same model part as well, in one ring whose slowest hop is
// the slower of the dp link and the link between the copies' ranks (Chimera Sec. 3.4).
double reduce_grad_time(const Schedule& s, int stage, const Topology& topo, double bytes, int dp, const Link& dp_link) {
  if (s.num_chains == 1) return ring_allreduce_s(bytes, dp, dp_link);
  Link link = dp_link;
  for (int c = 0; c < s.num_chains; ++c) {
    int copy = c * s.stages_per_chain() + s.model_part(stage);
    if (copy == stage) continue;
    Link l = topo.p2p_link(s.rank_of(stage), s.rank_of(copy));
    if (l.kind != "self" && (link.kind == "self" || l.bandwidth_Bps < link.bandwidth_Bps)) link = l;
  }
  return ring_allreduce_s(bytes, dp * s.num_chains, link);
}

}  // namespace

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

CostTable analytic_cost_table(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Schedule& s,
                              const Profile* prof) {
  check_fit(m, c, p);
  if (s.num_ranks != p.pp)
    throw InputError("schedule '" + s.name + "' has " + std::to_string(s.num_ranks) + " ranks but plan.pp = " +
                     std::to_string(p.pp));
  const int S = s.stages_per_chain();
  std::vector<int> layers = partition_layers(m, p, S);
  Topology topo(c, p);
  const int b = p.microbatch_size, t = p.tp;
  const double rate = c.gpu_peak_flops_per_s * c.achieved_efficiency;  // FLOP/s one GPU sustains
  const Link tp_link = topo.group_link(kTp);
  const Link dp_link = topo.group_link(kDp);
  CostTable table;
  const double tp_bytes = memory::tp_allreduce_bytes(m, b);
  double tp_ar_s = comm_s(prof, "all_reduce", t, tp_bytes, tp_link, ring_allreduce_s(tp_bytes, t, tp_link), table.notes);
  // Sequence parallelism: an all-gather and a reduce-scatter of the same buffer in place of each
  // all-reduce (Korthikanti et al., MLSys 2023), the same bytes on a ring; measured ones
  // where the profile has both.
  const bool sp = p.sequence_parallel;
  if (sp) {
    std::vector<std::string> sp_notes;
    double ag = comm_s(prof, "all_gather", t, tp_bytes, tp_link, -1, sp_notes);
    double rs = comm_s(prof, "reduce_scatter", t, tp_bytes, tp_link, -1, sp_notes);
    if (ag >= 0 && rs >= 0) {
      tp_ar_s = ag + rs;
      table.notes.insert(table.notes.end(), sp_notes.begin(), sp_notes.end());
    }
  }
  const double msg_bytes = memory::boundary_message_bytes(m, b, t, sp);
  const bool selective = p.recompute == RecomputePolicy::Selective;

  table.stages.resize(static_cast<size_t>(s.num_stages));
  LayerCost layer_m, head_m, embed_m;  // measured costs, when profiled
  if (prof) {
    layer_m = profiled_layer(*prof, "transformer", m, b, t);
    head_m = profiled_layer(*prof, "head", m, b, t);
    embed_m = profiled_layer(*prof, "embedding", m, b, t);
    for (const LayerCost* lc : {&layer_m, &head_m, &embed_m})
      if (lc->extrapolated) table.notes.push_back(lc->note);
  }
  table.params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  for (int st = 0; st < s.num_stages; ++st) {
    StageCost& sc = table.stages[static_cast<size_t>(st)];
    const int part = s.model_part(st);
    const double n = layers[static_cast<size_t>(part)];
    const bool first = s.is_first(st), last = s.is_last(st);
    sc.layers = static_cast<int>(n);
    sc.weight = n * s.num_ranks / m.num_layers;
    // Compute: per-layer FLOPs split t ways; two tp all-reduces per layer in each direction.
    double fwd = n * flops::layer_forward_flops(m, b) / t / rate;
    double bwd_in = n * flops::layer_backward_input_flops(m, b) / t / rate;
    double bwd_w = n * flops::layer_backward_weight_flops(m, b) / t / rate;
    double sel = selective ? n * flops::layer_attention_forward_flops(m, b) / t / rate : 0;
    double tp_comm = n * 2 * tp_ar_s;
    double head_f = last ? flops::head_forward_flops(m, b) / t / rate : 0;
    double head_i = head_f, head_w = head_f, embed_f = 0, embed_b = 0;
    if (prof) {
      // Measured: the shard's compute at this tp (profiler/layers.h); its all-reduces are
      // tp_comm, from the measured all-reduce over t ranks where the profile has one.
      fwd = n * layer_m.f_s;
      bwd_in = n * layer_m.i_s;
      bwd_w = n * layer_m.w_s;
      // Selective recomputation repeats the attention core: its FLOP share of the measured forward.
      sel = selective ? n * layer_m.f_s * flops::layer_attention_forward_flops(m, b) / flops::layer_forward_flops(m, b) : 0;
      head_f = last ? head_m.f_s : 0;
      head_i = last ? head_m.i_s : 0;
      head_w = last ? head_m.w_s : 0;
      embed_f = first ? embed_m.f_s : 0;
      embed_b = first ? embed_m.b_s : 0;
    }
    sc.f_s = fwd + tp_comm + head_f + embed_f;
    sc.i_s = bwd_in + sel + tp_comm + head_i + embed_b;
    sc.w_s = bwd_w + head_w;
    sc.b_s = sc.i_s + sc.w_s;
    sc.r_s = prof ? n * layer_m.r_s + tp_comm : fwd + tp_comm;
    sc.tp_allreduces_f = t > 1 ? static_cast<int>(2 * n) : 0;
    sc.tp_allreduces_i = sc.tp_allreduces_f;
    sc.tp_allreduce_bytes = t > 1 ? memory::tp_allreduce_bytes(m, b) : 0;
    sc.tp_comm_f_s = tp_comm;
    sc.tp_comm_i_s = tp_comm;
    // Point-to-point at the stage's boundaries.
    int nx = s.next_stage(st), pv = s.prev_stage(st);
    if (nx >= 0) {
      Link l = topo.p2p_link(s.rank_of(st), s.rank_of(nx));
      sc.send_f_s = comm_s(prof, "p2p", 2, msg_bytes, l, p2p_s(msg_bytes, l), table.notes);
    }
    if (pv >= 0) {
      Link l = topo.p2p_link(s.rank_of(st), s.rank_of(pv));
      sc.send_b_s = comm_s(prof, "p2p", 2, msg_bytes, l, p2p_s(msg_bytes, l), table.notes);
    }
    // Parameters and their data-parallel reduction.
    double params = n * memory::layer_params_per_rank(m, t) + (first ? memory::embedding_params_per_rank(m, t) : 0) +
                    (last ? memory::head_params_per_rank(m, t) : 0);
    table.params[static_cast<size_t>(s.rank_of(st))] += params;
    sc.reduce_grad_s = reduce_grad_time(s, st, topo, params * m.bytes_per_param, p.dp, dp_link);
    if (s.num_chains == 1)
      sc.reduce_grad_s = comm_s(prof, "all_reduce", p.dp, params * m.bytes_per_param, dp_link, sc.reduce_grad_s, table.notes);
    // Activations.
    double per_layer =
        selective ? memory::layer_activation_selective_bytes(m, b, t, sp) : memory::layer_activation_bytes(m, b, t, sp);
    double extra = (first ? memory::embedding_activation_bytes(m, b, t, sp) : 0) +
                   (last ? memory::head_activation_bytes(m, b, t, sp) : 0);
    sc.act_bytes = n * per_layer + extra;
    sc.ckpt_bytes = n * memory::layer_checkpoint_bytes(m, b, t, sp) + extra;
    if (prof && !selective && !sp) {
      double head_x = last ? head_m.activation_bytes : 0, embed_x = first ? embed_m.activation_bytes : 0;
      sc.act_bytes = n * layer_m.activation_bytes + head_x + embed_x;
      sc.ckpt_bytes = n * layer_m.checkpoint_bytes + head_x + embed_x;
    }
    sc.offload_s = sc.act_bytes / c.host_link_bandwidth_Bps;
    sc.reload_s = sc.offload_s;
  }
  table.optimizer_s.resize(static_cast<size_t>(s.num_ranks));
  table.static_bytes.resize(static_cast<size_t>(s.num_ranks));
  for (int r = 0; r < s.num_ranks; ++r) {
    double params = table.params[static_cast<size_t>(r)];
    table.static_bytes[static_cast<size_t>(r)] = params * memory::static_bytes_per_param(m);
    table.optimizer_s[static_cast<size_t>(r)] =
        prof && prof->optimizer_s_per_param > 0
            ? params * prof->optimizer_s_per_param
            : params * memory::optimizer_traffic_bytes_per_param(m) / c.gpu_memory_bandwidth_Bps;
  }
  std::sort(table.notes.begin(), table.notes.end());
  table.notes.erase(std::unique(table.notes.begin(), table.notes.end()), table.notes.end());
  return table;
}

}  // namespace stagecraft::costmodel
