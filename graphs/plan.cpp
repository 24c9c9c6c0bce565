#include "graphs/plan.h"

#include <algorithm>
#include <numeric>

#include "costmodel/estimate.h"
#include "graphs/estimate.h"
#include "schedules/error.h"

namespace stagecraft::graphs {

int microbatch_size_of(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.kind == "input" && !n.shape.empty()) return static_cast<int>(n.shape[0]);
  return 1;
}

costmodel::ModelSpec plan_model_of(const Graph& g, const ShardOptions& so) {
  costmodel::ModelSpec m = model_of(g);
  m.num_layers = static_cast<int>(shard(g, so).subgraphs.size());
  // tp must divide every column split's width (graphs/tp.h): their greatest common divisor
  // stands for the heads and the MLP width the planner's tp_divides checks (1: tp 1 only).
  std::int64_t width = 0;
  for (const Node& n : g.nodes)
    if (n.tp == "column" && !n.shape.empty()) width = std::gcd(width, n.shape.back());
  m.num_heads = m.ffn_hidden_size = static_cast<int>(std::max<std::int64_t>(width, 1));
  return m;
}

planner::SearchResult search_graph(const Graph& g, const costmodel::ClusterSpec& c, planner::PlanSpace space,
                                   planner::SearchOptions opt, const ShardOptions& so) {
  space.sequence_parallel = {false};
  space.tp_overlap = {schedules::TpOverlap::Blocking};
  space.microbatch_sizes = {microbatch_size_of(g)};
  auto& r = space.recompute;
  r.erase(std::remove(r.begin(), r.end(), costmodel::RecomputePolicy::Selective), r.end());
  if (r.empty()) throw InputError("plan space: recompute = selective alone is not priced for a graph model (allowed: none, full)");
  opt.estimate = [&g, &so](const costmodel::ClusterSpec& cl, const costmodel::ParallelPlan& p) {
    return estimate_graph(g, cl, p, {}, so);
  };
  planner::SearchResult res = planner::search(plan_model_of(g, so), c, space, opt);
  // The stages each plan was priced with, written out (in subgraphs) so that the plan replays.
  const Sharding sh = shard(g, so);
  for (planner::Candidate& cand : res.best)
    if (cand.plan.pp > 1 && cand.plan.stage_layers.empty())
      for (const StagePart& sp : stage_partition(g, sh, res.cluster, cand.plan, costmodel::plan_schedule(cand.plan).stages_per_chain()).stages)
        cand.plan.stage_layers.push_back(sp.count);
  return res;
}

}  // namespace stagecraft::graphs
