#include "planner/layer_tp.h"

#include <functional>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "costmodel/topology.h"
#include "planner/milp.h"
#include "schedules/error.h"

namespace stagecraft::planner {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;
using costmodel::RecomputePolicy;
namespace memory = costmodel::memory;

namespace {

// The plan one replica of a layer at degree d runs: tp = d, the batch split T/d ways more.
ParallelPlan degree_plan(const ParallelPlan& p, int d, bool split) {
  ParallelPlan q = p;
  q.layer_tp.clear();
  q.tp = d;
  q.dp = p.dp * (p.tp / d);
  q.microbatch_size = p.microbatch_size * d / p.tp;
  q.stage_layers.clear();
  q.stage_tp_overlap.clear();
  q.sequence_parallel = p.sequence_parallel && d > 1;
  q.tp_overlap = split ? p.tp_overlap : schedules::TpOverlap::Blocking;
  return q;
}

DegreeCosts degree_costs(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, int d, bool overlapped,
                         const costmodel::Profile* prof) {
  DegreeCosts o;
  o.degree = d;
  o.samples = p.microbatch_size * d / p.tp;
  o.sub_batches = overlapped && d > 1 && o.samples % 2 == 0 ? 2 : 1;
  const ParallelPlan q = degree_plan(p, d, o.sub_batches == 2);
  costmodel::check_fit(m, c, q);
  const schedules::Schedule s = costmodel::plan_schedule(q);
  const costmodel::CostTable table = costmodel::analytic_cost_table(m, c, q, s, prof);
  const costmodel::InnerCosts& ic = table.stages.at(0).inner;  // the transformer blocks' pieces
  const bool full = p.recompute == RecomputePolicy::Full;
  o.fwd_s[0] = ic.attn_f_s;
  o.fwd_s[1] = ic.mlp_f_s;
  o.bwd_s[0] = ic.attn_i_s + ic.attn_w_s + (full ? ic.attn_r_s : 0);
  o.bwd_s[1] = ic.mlp_i_s + ic.mlp_w_s + (full ? ic.mlp_r_s : 0);
  o.comm_s = ic.comm_s;
  // Gradients of the layer over its dp * T/d replicas (a reduce-scatter and an all-gather of the
  // parameters with a distributed optimizer), its optimizer step and static bytes: the cost
  // table's own rules (costs.h: set_grad_reduction, set_rank_costs) on the layer's parameters.
  const double params = memory::layer_params_per_rank(m, d);  // one GPU's share of the layer
  const costmodel::Topology topo(c, q);
  costmodel::StageCost layer;
  layer.grad_bytes = params * costmodel::grad_bytes_per_param(m);
  std::vector<std::string> notes;
  costmodel::set_grad_reduction(layer, s, 0, topo, q, prof, notes);
  costmodel::CostTable rank;
  rank.params = {params};
  costmodel::set_rank_costs(rank, m, c, q, topo, prof);
  o.grad_reduce_s = layer.reduce_grad_s + rank.param_gather_s[0];
  o.optimizer_s = rank.optimizer_s[0];
  o.static_bytes = rank.static_bytes[0];
  // Kept per microbatch (pp = 1: one in flight) by costs.h's rule: the checkpoints with full
  // recomputation (one layer rebuilt at a time in B), else the (selective) activations.
  const int bb = o.samples / o.sub_batches;
  const costmodel::LayerSavedBytes saved =
      costmodel::layer_saved_bytes(m, bb, d, q.sequence_parallel, p.recompute == RecomputePolicy::Selective, q.tp_overlap);
  if (full) {
    o.saved_bytes = o.sub_batches * saved.ckpt_bytes;
    o.temp_bytes = o.sub_batches * saved.act_bytes;  // one layer rebuilt in B
  } else {
    o.saved_bytes = o.sub_batches * saved.act_bytes;
  }
  return o;
}

// T_AG of eq. (4): the (b hi / T, s, h) activations (or their gradients) gathered over the
// hi/lo replicas of the lower degree, GPUs lo apart; the link as the topology sees all such
// groups at once.
double reshard_s(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, int lo, int hi) {
  ParallelPlan g = p;
  g.tp = lo;
  g.dp = hi / lo;
  g.pp = p.num_gpus() / hi;
  g.rank_order = "tp-dp-pp";
  const costmodel::Link link = costmodel::Topology(c, g).group_link(costmodel::kDp);
  const double bytes = memory::tp_allreduce_bytes(m, p.microbatch_size * hi / p.tp);
  return costmodel::all_gather_s(bytes, hi / lo, link);
}

// One block's four costs of eq. (3) for one pass.
struct Block {
  double d0 = 0, d1 = 0, c0 = 0, c1 = 0;
};
Block block(const LayerTpProblem& pr, int option, int kind, bool forward) {
  const DegreeCosts& o = pr.options[static_cast<size_t>(option)];
  const double d = forward ? o.fwd_s[kind] : o.bwd_s[kind];
  if (o.sub_batches == 2) return {d, d, o.comm_s, o.comm_s};
  return {d, 0, o.comm_s, 0};  // one batch: its collective follows its compute, unhidden
}

// The block of node n in a pass: forward runs blocks 0 .. 2L-1, backward 2L-1 .. 0.
int block_of(int n, int blocks, bool forward) { return forward ? n : blocks - 1 - n; }

// Edge cost (4) between a layer at option a and the next at option b, per microbatch.
double edge_s(const LayerTpProblem& pr, int a, int b) {
  const int da = pr.options[static_cast<size_t>(a)].degree, db = pr.options[static_cast<size_t>(b)].degree;
  if (da == db) return 0;
  const double ag = pr.allgather_s[static_cast<size_t>(a)][static_cast<size_t>(b)];
  if (!pr.overlapped) return ag;
  if (da < db) return ag + std::min(block(pr, a, 1, true).c1, block(pr, b, 0, true).d0);  // forward: MLP of l, attention of l+1
  return ag + std::min(block(pr, b, 0, false).c1, block(pr, a, 1, false).d0);            // backward: attention of l+1, MLP of l
}

}  // namespace

LayerTpProblem layer_tp_problem(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& plan,
                                const costmodel::Profile* prof) {
  ParallelPlan p = plan;
  p.layer_tp.clear();  // the degrees are what this problem chooses
  costmodel::check(p);
  costmodel::check_fit(m, c, p);
  if (p.pp != 1)
    throw InputError("plan.pp = " + std::to_string(p.pp) +
                     ": per-layer tensor-parallel degrees are planned without pipelining, as Oases runs them "
                     "(Sec. VI-A); use pp = 1");
  if (p.tp < 2) throw InputError("plan.tp = " + std::to_string(p.tp) + ": per-layer degrees need tp >= 2");
  if (p.cp > 1) throw InputError("plan.cp = " + std::to_string(p.cp) + ": per-layer degrees are planned on whole sequences; use cp = 1");
  if (p.zero == 3)
    throw InputError("plan.zero = 3: per-layer degrees are planned with whole parameters on each rank, as Oases "
                     "trains; use zero 0, 1 or 2");
  if (p.rank_order.rfind("tp", 0) != 0)
    throw InputError("plan.rank_order = '" + p.rank_order + "': per-layer degrees need tp varying fastest (tp-dp-pp or tp-pp-dp)");
  LayerTpProblem pr;
  pr.layers = m.num_layers;
  pr.microbatches = p.num_microbatches;
  pr.tp = p.tp;
  pr.overlapped = p.tp_overlap != schedules::TpOverlap::Blocking;
  pr.overlap_grad_reduce = p.overlap_grad_reduce;
  pr.memory_bytes = c.usable_memory_bytes();
  for (int d = 1; d <= p.tp; d *= 2) {
    if (p.tp % d != 0 || !costmodel::tp_divides(m, d)) continue;
    if (p.microbatch_size % (p.tp / d) != 0) continue;  // each replica runs whole samples
    pr.options.push_back(degree_costs(m, c, p, d, pr.overlapped, prof));
  }
  if (pr.options.empty() || pr.options.back().degree != p.tp)
    throw InputError("plan.tp = " + std::to_string(p.tp) + ": must be a power of two for per-layer degrees");
  const size_t n = pr.options.size();
  pr.allgather_s.assign(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j) {
        const int lo = std::min(pr.options[i].degree, pr.options[j].degree);
        const int hi = std::max(pr.options[i].degree, pr.options[j].degree);
        pr.allgather_s[i][j] = reshard_s(m, c, p, lo, hi);
      }
  // What no degree changes: the evaluator's peak for the uniform plan less its layers' share.
  costmodel::EstimateOptions eo;
  eo.profile = prof;
  const costmodel::Estimate e = costmodel::estimate(m, c, p, eo);
  const DegreeCosts& u = pr.options.back();
  pr.fixed_bytes = e.max_memory_bytes - (pr.layers * (u.static_bytes + u.saved_bytes) + u.temp_bytes);
  return pr;
}

LayerTpBreakdown evaluate_layer_tp(const LayerTpProblem& pr, const std::vector<int>& choice) {
  if (static_cast<int>(choice.size()) != pr.layers)
    throw InputError("layer tp choice has " + std::to_string(choice.size()) + " entries; the model has " +
                     std::to_string(pr.layers) + " layers");
  const int blocks = 2 * pr.layers;
  LayerTpBreakdown v;
  double per_mb = 0, comm = 0, backward_compute = 0;
  for (bool fwd : {true, false}) {
    std::vector<Block> seq;
    for (int n = 0; n < blocks; ++n) {
      const int b = block_of(n, blocks, fwd);
      seq.push_back(block(pr, choice[static_cast<size_t>(b / 2)], b % 2, fwd));
    }
    for (const Block& x : seq) {
      comm += x.c0 + x.c1;
      if (!fwd) backward_compute += x.d0 + x.d1;
    }
    if (!pr.overlapped) {
      for (const Block& x : seq) per_mb += x.d0 + x.d1 + x.c0 + x.c1;
      continue;
    }
    per_mb += seq.front().d0 + seq.back().c1;  // eq. (3)
    for (size_t n = 0; n < seq.size(); ++n) {
      if (n > 0) per_mb += std::max(seq[n].d0, seq[n - 1].c1);
      per_mb += std::max(seq[n].d1, seq[n].c0);
    }
  }
  double reshard = 0, grads = 0, opt = 0, kept = 0, temp = 0;
  for (int l = 0; l < pr.layers; ++l) {
    const DegreeCosts& o = pr.options[static_cast<size_t>(choice[static_cast<size_t>(l)])];
    if (l + 1 < pr.layers) reshard += edge_s(pr, choice[static_cast<size_t>(l)], choice[static_cast<size_t>(l + 1)]);
    grads += o.grad_reduce_s;
    opt += o.optimizer_s;
    kept += o.static_bytes + o.saved_bytes;
    temp = std::max(temp, o.temp_bytes);
  }
  v.reshard_s = pr.microbatches * reshard;
  v.tp_comm_s = pr.microbatches * comm;
  v.grad_exposed_s = pr.overlap_grad_reduce ? std::max(0.0, grads - backward_compute) : grads;
  v.time_s = pr.microbatches * (per_mb + reshard) + v.grad_exposed_s + opt;
  v.memory_bytes = pr.fixed_bytes + kept + temp;
  v.fits = v.memory_bytes <= pr.memory_bytes;
  return v;
}

namespace {

std::vector<int> degrees_of(const LayerTpProblem& pr, const std::vector<int>& choice) {
  std::vector<int> d;
  for (int o : choice) d.push_back(pr.options[static_cast<size_t>(o)].degree);
  return d;
}

// Linear expression sum_j x[l][j] * f(option j).
template <typename F>
Milp::Terms expr(const std::vector<std::vector<int>>& x, int l, double scale, F f) {
  Milp::Terms t;
  for (size_t j = 0; j < x[static_cast<size_t>(l)].size(); ++j) t.emplace_back(x[static_cast<size_t>(l)][j], scale * f(static_cast<int>(j)));
  return t;
}

Milp::Terms minus(Milp::Terms t) {
  for (auto& [v, a] : t) a = -a;
  return t;
}

}  // namespace

namespace {

// Oases' ILP (Sec. 4.2) for one problem, row group by row group; solver units: ms and GiB.
struct LayerTpIlp {
  const LayerTpProblem& pr;
  const double ms = 1e3, gib = 1.0 / (1024.0 * 1024 * 1024);
  const int p, blocks;
  const double mb;
  Milp lp;
  std::vector<std::vector<int>> x;  // (layers, p) one-hot choices

  explicit LayerTpIlp(const LayerTpProblem& problem)
      : pr(problem), p(static_cast<int>(problem.options.size())), blocks(2 * problem.layers), mb(problem.microbatches),
        x(static_cast<size_t>(problem.layers)) {}

  static void add_terms(Milp::Terms& into, const Milp::Terms& t) { into.insert(into.end(), t.begin(), t.end()); }
  // A block's four costs (d0, d1, c0, c1) are linear in its layer's choice.
  std::function<double(int)> cost(int b, bool fwd, int which) const {
    return [this, b, fwd, which](int j) {
      const Block k = block(pr, j, b % 2, fwd);
      return which == 0 ? k.d0 : which == 1 ? k.d1 : which == 2 ? k.c0 : k.c1;
    };
  }
  void add_linear_objective(const Milp::Terms& t) {
    for (const auto& [v, a] : t) lp.add_objective(v, a);
  }

  void choices();
  void pass(bool fwd);
  void overlapped_pass(bool fwd);
  void edges();
  void hidden_reduction();
  void memory();
  LayerTpSolution decode(const Milp::Result& res);
};

// One degree per layer, with its optimizer step and (without overlap) its gradient reduction.
void LayerTpIlp::choices() {
  for (int l = 0; l < pr.layers; ++l) {
    Milp::Terms one;
    for (int j = 0; j < p; ++j) {
      const DegreeCosts& o = pr.options[static_cast<size_t>(j)];
      const double linear = o.optimizer_s + (pr.overlap_grad_reduce ? 0 : o.grad_reduce_s);
      x[static_cast<size_t>(l)].push_back(lp.add_binary(ms * linear));
      one.emplace_back(x[static_cast<size_t>(l)].back(), 1.0);
    }
    lp.add_eq(one, 1);
  }
}

// Eq. (3) for one pass: without overlap every block's four costs in sequence.
void LayerTpIlp::pass(bool fwd) {
  if (pr.overlapped) return overlapped_pass(fwd);
  Milp::Terms all;
  for (int n = 0; n < blocks; ++n) {
    const int b = block_of(n, blocks, fwd);
    for (int w = 0; w < 4; ++w) add_terms(all, expr(x, b / 2, ms * mb, cost(b, fwd, w)));
  }
  add_linear_objective(all);
}

// With overlap: the ends, then per block z >= d0 and the previous c1, y >= d1 and c0.
void LayerTpIlp::overlapped_pass(bool fwd) {
  const int first = block_of(0, blocks, fwd), last = block_of(blocks - 1, blocks, fwd);
  Milp::Terms ends = expr(x, first / 2, ms * mb, cost(first, fwd, 0));
  add_terms(ends, expr(x, last / 2, ms * mb, cost(last, fwd, 3)));
  add_linear_objective(ends);
  auto at_least = [&](int var, const Milp::Terms& t) {
    Milp::Terms r = minus(t);
    r.emplace_back(var, 1.0);
    lp.add_ge(r, 0);
  };
  for (int n = 0; n < blocks; ++n) {
    const int b = block_of(n, blocks, fwd), l = b / 2;
    if (n > 0) {
      const int pb = block_of(n - 1, blocks, fwd);
      const int z = lp.add_continuous(mb);  // in ms already
      at_least(z, expr(x, l, ms, cost(b, fwd, 0)));
      at_least(z, expr(x, pb / 2, ms, cost(pb, fwd, 3)));
    }
    const int y = lp.add_continuous(mb);  // in ms already
    at_least(y, expr(x, l, ms, cost(b, fwd, 1)));
    at_least(y, expr(x, l, ms, cost(b, fwd, 2)));
  }
}

// Edges (4): e >= x[l][a] + x[l+1][b] - 1 carries the constant cost of that pair.
void LayerTpIlp::edges() {
  for (int l = 0; l + 1 < pr.layers; ++l)
    for (int a = 0; a < p; ++a)
      for (int b = 0; b < p; ++b) {
        const double r = edge_s(pr, a, b);
        if (r <= 0) continue;
        const int e = lp.add_continuous(ms * mb * r, 0, 1);
        lp.add_ge({{e, 1.0}, {x[static_cast<size_t>(l)][static_cast<size_t>(a)], -1.0},
                   {x[static_cast<size_t>(l + 1)][static_cast<size_t>(b)], -1.0}},
                  -1);
      }
}

// Gradient reduction hidden behind one backward where it overlaps: w >= sum g - sum d(B).
void LayerTpIlp::hidden_reduction() {
  if (!pr.overlap_grad_reduce) return;
  Milp::Terms row;  // d(B) of one microbatch, what a gradient reduction can hide behind
  for (int b = 0; b < blocks; ++b) {
    add_terms(row, expr(x, b / 2, ms, cost(b, false, 0)));
    add_terms(row, expr(x, b / 2, ms, cost(b, false, 1)));
  }
  const int w = lp.add_continuous(1.0);
  for (int l = 0; l < pr.layers; ++l) add_terms(row, minus(expr(x, l, ms, [&](int j) { return pr.options[static_cast<size_t>(j)].grad_reduce_s; })));
  row.emplace_back(w, 1.0);
  lp.add_ge(row, 0);
}

// Memory (6): fixed + sum (m_s + m_t) + r <= m, r >= m_r of every layer.
void LayerTpIlp::memory() {
  const int r = lp.add_continuous(0.0);
  Milp::Terms mem;
  for (int l = 0; l < pr.layers; ++l) {
    add_terms(mem, expr(x, l, gib, [&](int j) {
      return pr.options[static_cast<size_t>(j)].static_bytes + pr.options[static_cast<size_t>(j)].saved_bytes;
    }));
    Milp::Terms t = minus(expr(x, l, gib, [&](int j) { return pr.options[static_cast<size_t>(j)].temp_bytes; }));
    t.emplace_back(r, 1.0);
    lp.add_ge(t, 0);
  }
  mem.emplace_back(r, 1.0);
  lp.add_le(mem, gib * (pr.memory_bytes - pr.fixed_bytes));
}

LayerTpSolution LayerTpIlp::decode(const Milp::Result& res) {
  LayerTpSolution out;
  out.variables = lp.num_variables();
  out.rows = lp.num_rows();
  if (res.optimal) {
    std::vector<int> choice;
    for (int l = 0; l < pr.layers; ++l) {
      const auto& xl = x[static_cast<size_t>(l)];
      int best = 0;
      for (int j = 1; j < p; ++j)
        if (res.x[static_cast<size_t>(xl[static_cast<size_t>(j)])] > res.x[static_cast<size_t>(xl[static_cast<size_t>(best)])]) best = j;
      choice.push_back(best);
    }
    out.value = evaluate_layer_tp(pr, choice);
    out.degrees = degrees_of(pr, choice);
  } else if (!res.infeasible) {
    throw Error("CBC found no proven optimum for the per-layer tp ILP (" + std::to_string(lp.num_variables()) +
                " variables) within its time limit");
  }
  return out;
}

}  // namespace

LayerTpSolution solve_layer_tp(const LayerTpProblem& pr) {
  const auto t0 = std::chrono::steady_clock::now();
  LayerTpIlp ilp(pr);
  ilp.choices();
  for (bool fwd : {true, false}) ilp.pass(fwd);
  ilp.edges();
  ilp.hidden_reduction();
  ilp.memory();
  LayerTpSolution out = ilp.decode(ilp.lp.solve());
  out.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

LayerTpSolution solve_layer_tp_exhaustive(const LayerTpProblem& pr) {
  const auto t0 = std::chrono::steady_clock::now();
  const int p = static_cast<int>(pr.options.size());
  std::vector<int> choice(static_cast<size_t>(pr.layers), 0), best;
  LayerTpBreakdown best_v;
  while (true) {
    const LayerTpBreakdown v = evaluate_layer_tp(pr, choice);
    if (v.fits && (best.empty() || v.time_s < best_v.time_s)) {
      best = choice;
      best_v = v;
    }
    int l = 0;
    while (l < pr.layers && ++choice[static_cast<size_t>(l)] == p) choice[static_cast<size_t>(l++)] = 0;
    if (l == pr.layers) break;
  }
  LayerTpSolution out;
  if (!best.empty()) {
    out.degrees = degrees_of(pr, best);
    out.value = best_v;
  }
  out.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string format_degrees(const std::vector<int>& degrees) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < degrees.size();) {
    size_t j = i;
    while (j < degrees.size() && degrees[j] == degrees[i]) ++j;
    s << (i > 0 ? "+" : "") << "[" << degrees[i] << "]x" << (j - i);
    i = j;
  }
  s << "]";
  return s.str();
}

}  // namespace stagecraft::planner
