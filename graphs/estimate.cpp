#include "graphs/estimate.h"

#include <algorithm>
#include <memory>

#include "costmodel/comm.h"
#include "costmodel/costs.h"
#include "costmodel/memory.h"
#include "costmodel/price.h"
#include "costmodel/topology.h"
#include "schedules/buckets.h"
#include "graphs/partition.h"
#include "graphs/tp.h"
#include "schedules/error.h"

namespace stagecraft::graphs {
namespace {

void refuse_unpriced(const costmodel::ParallelPlan& p, const costmodel::EstimateOptions& opt) {
  auto no = [](const std::string& what, const std::string& allowed) {
    throw InputError(what + " with a graph model is not priced yet (allowed: " + allowed + "; docs/graphs.md)");
  };
  if (p.tp > 1 && (p.tp_overlap != schedules::TpOverlap::Blocking || !p.stage_tp_overlap.empty()))
    no("plan.tp_overlap other than blocking", "blocking");
  if (p.sequence_parallel) no("plan.sequence_parallel = true", "false");
  if (!p.layer_tp.empty()) no("plan.layer_tp", "absent");
  if (opt.profile) no("a measured profile (--profile)", "the analytic costs");
  if (p.recompute == costmodel::RecomputePolicy::Selective) no("plan.recompute = selective", "none, full");
  if (p.zero == 3) no("plan.zero = 3", "0, 1, 2");
  if (p.cp > 1) no("plan.cp = " + std::to_string(p.cp), "1");
  if (p.ep > 1) no("plan.ep = " + std::to_string(p.ep), "1");
}

// How a stage's kernels are priced (costmodel/price.h): by shape where the cluster gives its GPU's
// shape, else their FLOPs at the flat rate.
struct Pricing {
  const costmodel::ClusterSpec& cluster;
  const costmodel::KernelStack& stack;
  std::vector<std::string>* notes;
};

// One subgraph as one tp rank runs it: its nodes' kernels priced (price.h: by shape, or their
// FLOPs at the flat rate), its measured nodes' times (a measured backward split by what its node
// has parameters for: costmodel::weight_gradient_share) and its blocking tp all-reduces
// (graphs/tp.h). Stage costs and stage balancing both price subgraphs here.
struct SubgraphCost {
  double f_s = 0;          // forward, its all-reduces included
  double i_s = 0;          // input gradient, the backward's all-reduces included
  double w_s = 0;          // weight gradient
  double ar_f_s = 0, ar_b_s = 0;  // the all-reduces inside the forward, the backward
  int ar_f = 0, ar_b = 0;  // how many
};

SubgraphCost price_subgraph(const TpSubgraph& s, const Pricing& pr, int t, const costmodel::Link& tp_link) {
  SubgraphCost c;
  for (double x : s.fwd_allreduce_bytes) c.ar_f_s += costmodel::ring_allreduce_s(x, t, tp_link), ++c.ar_f;
  for (double x : s.bwd_allreduce_bytes) c.ar_b_s += costmodel::ring_allreduce_s(x, t, tp_link), ++c.ar_b;
  double shape_f = 0, shape_i = 0, shape_w = 0;
  for (const NodeWork& w : s.work) {
    shape_f += costmodel::block_s(w.f, w.ctx, pr.cluster, pr.stack, pr.notes);
    shape_i += costmodel::block_s(w.i, w.ctx, pr.cluster, pr.stack, pr.notes);
    shape_w += costmodel::block_s(w.w, w.ctx, pr.cluster, pr.stack, pr.notes);
  }
  c.f_s = shape_f + s.fwd_s + c.ar_f_s;
  c.i_s = shape_i + s.bwd_s - s.bwd_w_s + c.ar_b_s;
  c.w_s = shape_w + s.bwd_w_s;
  return c;
}

// Stage costs from its subgraphs (the workload's layers) as one tp rank runs them: the sums of
// their prices; a recomputation repeats the forward but the model's ends' (embedding, head and
// loss), as Megatron checkpoints layers only.
costmodel::StageCost stage_cost(const std::vector<TpSubgraph>& ts, const costmodel::StageWorkload& w, const Pricing& pr,
                                int t, const costmodel::Link& tp_link) {
  costmodel::StageCost sc;
  double end_f = 0;
  for (int i = w.first_layer; i < w.first_layer + w.layers; ++i) {
    const SubgraphCost c = price_subgraph(ts[static_cast<size_t>(i)], pr, t, tp_link);
    sc.f_s += c.f_s, sc.i_s += c.i_s, sc.w_s += c.w_s;
    sc.tp_comm_f_s += c.ar_f_s, sc.tp_comm_i_s += c.ar_b_s;
    sc.tp_allreduces_f += c.ar_f, sc.tp_allreduces_i += c.ar_b;
    if (ts[static_cast<size_t>(i)].end) end_f += c.f_s;
  }
  sc.b_s = sc.i_s + sc.w_s;
  sc.r_s = sc.f_s - end_f;
  sc.tp_exposed_f_s = sc.tp_comm_f_s;
  sc.tp_exposed_b_s = sc.tp_comm_i_s;
  sc.tp_allreduce_bytes = w.tp_collective_bytes;
  sc.act_bytes = w.act_bytes;
  sc.ckpt_bytes = w.ckpt_bytes;
  sc.work_bytes = w.work_bytes;
  sc.layers = w.layers;
  return sc;
}

// One stage's workload from its subgraphs (the graph's counterpart of costmodel's
// build_plan_workload; its `layers` are subgraphs): what it sends, holds, reduces and keeps.
costmodel::StageWorkload stage_workload(const std::vector<TpSubgraph>& ts, const StagePart& part, const schedules::Schedule& s,
                                        int st, bool recompute_input_only, double bytes_per_param) {
  costmodel::StageWorkload w;
  w.stage = st;
  w.part = s.model_part(st);
  w.first_layer = part.first;
  w.layers = w.dense_layers = part.count;
  w.first = s.is_first(st);
  w.last = w.head = s.is_last(st);
  w.head_passes = w.last ? 1 : 0;
  double collective_bytes = 0;
  int collectives = 0;
  for (int i = part.first; i < part.first + part.count; ++i) {
    const TpSubgraph& x = ts[static_cast<size_t>(i)];
    w.act_bytes += x.act_bytes;
    w.work_bytes = std::max(w.work_bytes, x.act_bytes);  // a backward's working set: its largest subgraph's outputs
    w.grad_bytes += x.param_bytes;                       // this tp rank's, at the graph's parameter bytes
    for (double b : x.fwd_allreduce_bytes) collective_bytes += b, ++collectives, ++w.tp_collectives_per_pass;
    for (double b : x.bwd_allreduce_bytes) collective_bytes += b, ++collectives;
  }
  w.params = w.grad_bytes / bytes_per_param;
  w.tp_collective_bytes = collectives > 0 ? collective_bytes / collectives : 0;  // their mean, the engines' one size
  w.boundary_bytes = ts[static_cast<size_t>(part.first + part.count - 1)].boundary_bytes;
  const double input = part.first > 0 ? ts[static_cast<size_t>(part.first - 1)].boundary_bytes : 0;  // the cut it receives
  w.ckpt_bytes = recompute_input_only ? std::min(w.act_bytes, input) : w.act_bytes;  // its checkpoint under recomputation
  return w;
}

}  // namespace

costmodel::ModelSpec model_of(const Graph& g) {
  costmodel::ModelSpec m;
  m.name = g.name;
  m.num_layers = 0;
  m.seq_length = 1;
  for (const Node& n : g.nodes)
    if (n.kind == "input" && n.shape.size() == 2) {
      m.seq_length = static_cast<int>(n.shape[1]);
      break;
    }
  m.bytes_per_param = 2;
  m.bytes_per_activation = 2;
  m.source = "graph";
  return m;
}

namespace {

// Each subgraph's seconds of one microbatch as stage_cost prices it (the forward twice under full
// recomputation, then the backward): what the stages are balanced by.
std::vector<double> priced_subgraph_s(const std::vector<TpSubgraph>& ts, const costmodel::ClusterSpec& c,
                                      const costmodel::ParallelPlan& p) {
  std::vector<std::string> notes;  // the estimate's own pricing notes them
  const Pricing pricing{c, costmodel::load_stack(p.stack), &notes};
  const costmodel::Link tp_link = costmodel::Topology(c, p).group_link(costmodel::kTp);
  const double rc = p.recompute == costmodel::RecomputePolicy::Full ? 2 : 1;
  std::vector<double> out;
  for (const TpSubgraph& s : ts) {
    const SubgraphCost x = price_subgraph(s, pricing, p.tp, tp_link);
    out.push_back((s.end ? 1 : rc) * x.f_s + x.i_s + x.w_s);
  }
  return out;
}

Partition partition_priced(const Sharding& sh, const std::vector<TpSubgraph>& ts, const costmodel::ClusterSpec& c,
                           const costmodel::ParallelPlan& p, int stages) {
  PartitionOptions po;
  po.stages = stages;
  po.cluster = &c;
  po.subgraph_s = priced_subgraph_s(ts, c, p);
  return partition(sh, po, p.stage_layers);
}

}  // namespace

Partition stage_partition(const Graph& g, const Sharding& sh, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p,
                          int stages) {
  return partition_priced(sh, tp_subgraphs(g, sh, p.tp, &costmodel::load_stack(p.stack)), c, p, stages);
}

costmodel::Estimate estimate_graph(const Graph& g, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p,
                                   const costmodel::EstimateOptions& opt, const ShardOptions& so) {
  refuse_unpriced(p, opt);
  costmodel::check(p);
  costmodel::Estimate e;
  e.model = model_of(g);
  e.cluster = c;
  e.plan = p;
  e.schedule = costmodel::plan_schedule(p, opt.lower);
  const schedules::Schedule& s = e.schedule;
  const Sharding sh = shard(g, so);
  e.model.num_layers = static_cast<int>(sh.subgraphs.size());
  const int per_chain = s.stages_per_chain();
  const double rate = costmodel::flat_rate_flops_per_s(c);
  const costmodel::KernelStack& stack = costmodel::load_stack(p.stack);
  const std::vector<TpSubgraph> ts = tp_subgraphs(g, sh, p.tp, &stack);
  const Partition parts = partition_priced(sh, ts, c, p, per_chain);
  std::vector<std::string> notes;
  const Pricing pricing{c, stack, &notes};
  costmodel::Topology topo(c, p);
  const costmodel::Link tp_link = topo.group_link(costmodel::kTp);
  costmodel::CostTable& t = e.costs;
  t.params.assign(static_cast<size_t>(s.num_ranks), 0.0);
  double total_act = 0;
  for (const StagePart& sp : parts.stages) total_act += sp.act_bytes;
  auto pw = std::make_shared<costmodel::PlanWorkload>();  // built once, then priced (as build_plan_workload's)
  pw->model = pw->rank_model = e.model;
  pw->plan = p;
  for (int st = 0; st < s.num_stages; ++st)
    pw->stages.push_back(stage_workload(ts, parts.stages[static_cast<size_t>(s.model_part(st))], s, st,
                                        p.recompute == costmodel::RecomputePolicy::Full, e.model.bytes_per_param));
  for (const costmodel::StageWorkload& w : pw->stages) {
    costmodel::StageCost sc = stage_cost(ts, w, pricing, p.tp, tp_link);
    sc.weight = total_act > 0 ? parts.stages[static_cast<size_t>(w.part)].act_bytes * s.num_ranks / total_act : 1;
    const int prev = s.prev_stage(w.stage);
    const double in = prev >= 0 ? pw->stages[static_cast<size_t>(prev)].boundary_bytes : 0;
    costmodel::set_boundary_transfers(sc, s, w.stage, topo, w.boundary_bytes, in, nullptr, t.notes);
    sc.grad_bytes = w.grad_bytes;
    costmodel::set_grad_reduction(sc, s, w.stage, topo, p, nullptr, t.notes);
    sc.offload_s = c.host_link_bandwidth_Bps > 0 ? sc.act_bytes / c.host_link_bandwidth_Bps : 0;
    sc.reload_s = sc.offload_s;
    t.params[static_cast<size_t>(s.rank_of(w.stage))] += w.params;
    t.stages.push_back(sc);
  }
  e.workload = pw;
  costmodel::set_rank_costs(t, e.model, c, p, topo, nullptr);
  std::sort(notes.begin(), notes.end());
  notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
  t.notes.insert(t.notes.end(), notes.begin(), notes.end());
  t.notes.push_back("graph '" + g.name + "': " + std::to_string(sh.subgraphs.size()) + " subgraphs (Merak's graph sharding)");
  int measured = 0, operators = 0;
  for (const Node& n : g.nodes) {
    operators += n.kind != "input";
    measured += n.kind != "input" && (n.fwd_s >= 0 || n.bwd_s >= 0);
  }
  if (measured > 0)
    t.notes.push_back(std::to_string(measured) + " of " + std::to_string(operators) +
                      " operators priced from their measured times (fwd_s, bwd_s), the rest from their FLOPs");
  std::unique_ptr<costmodel::Evaluator> ev;
  costmodel::evaluate_costs(e, e.schedule, [&](const schedules::Schedule& lowered, const std::string&) -> const costmodel::Evaluator& {
    ev = std::make_unique<costmodel::Evaluator>(lowered, opt.eval);
    return *ev;
  });
  // FLOPs: every microbatch of every replica through the graph forward and backward; the
  // hardware count adds what the recompute actions repeat on every tp rank (their compute, the
  // all-reduces left out).
  double fb = 0;
  for (const Subgraph& x : sh.subgraphs) fb += x.fwd_flops + x.bwd_flops;
  const double replicas = static_cast<double>(p.dp) * p.num_microbatches;
  e.model_flops = fb * replicas;
  // What an R repeats: its stage's forward FLOPs but the model's ends (measured nodes' seconds at
  // the flat rate).
  std::vector<double> part_fwd_flops;
  for (const StagePart& part : parts.stages) {
    double x = 0;
    for (int i = part.first; i < part.first + part.count; ++i)
      if (!ts[static_cast<size_t>(i)].end) x += ts[static_cast<size_t>(i)].fwd_flops + ts[static_cast<size_t>(i)].fwd_s * rate;
    part_fwd_flops.push_back(x);
  }
  double recomputed = 0;
  for (const auto& list : e.schedule.actions)
    for (const schedules::Action& a : list)
      if (a.op == schedules::Op::R) recomputed += a.fraction * part_fwd_flops[static_cast<size_t>(e.schedule.model_part(a.stage))];
  e.hardware_flops = e.model_flops + recomputed * p.dp * p.tp;
  costmodel::set_rates(e);
  costmodel::set_fit(e);
  return e;
}

}  // namespace stagecraft::graphs
