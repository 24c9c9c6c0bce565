#include "workbench/layer_tp.h"

namespace stagecraft::workbench {

std::vector<LayerTpRow> plan_layer_tp(const SearchRequest& q, const costmodel::ModelSpec& m, const planner::SearchResult& r,
                                      const costmodel::Profile* profile) {
  std::vector<LayerTpRow> out;
  if (!q.layer_tp) return out;
  for (size_t i = 0; i < r.best.size(); ++i) {
    const costmodel::ParallelPlan& p = r.best[i].plan;
    if (p.pp != 1 || p.tp < 2 || p.zero == 3 || p.cp > 1) continue;  // what layer_tp_problem plans (planner/layer_tp.h)
    const planner::LayerTpProblem pr = planner::layer_tp_problem(m, r.cluster, p, profile);
    LayerTpRow row;
    row.rank = i;
    row.uniform = planner::evaluate_layer_tp(pr, std::vector<int>(static_cast<size_t>(pr.layers), static_cast<int>(pr.options.size()) - 1));
    row.best = planner::solve_layer_tp(pr);
    out.push_back(row);
  }
  return out;
}

}  // namespace stagecraft::workbench
