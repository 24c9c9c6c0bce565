#include "planner/bounds.h"

#include "costmodel/fsdp.h"
#include "costmodel/memory.h"
#include "costmodel/moe.h"

#include <algorithm>

namespace stagecraft::planner {

double memory_lower_bound_bytes(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p) {
  namespace mem = costmodel::memory;
  const mem::MoeLayerParams layers = mem::layers_params_per_rank(m, 0, m.num_layers, p.tp, p.ep, costmodel::expert_tp(p));
  const double params = layers.dense + mem::embedding_params_per_rank(m, p.tp) +
                        mem::head_params_per_rank(m, p.tp);  // one tp (and ep) rank's share of one model copy
  const double experts = layers.experts;  // the routed experts among them, sharded over their own group
  const int expert_shard = p.zero >= 1 ? costmodel::expert_data_parallel(p) : 1;
  return ((params - experts) * mem::static_bytes_per_param(m, p.zero, costmodel::shard_degree(p)) +
          experts * mem::static_bytes_per_param(m, p.zero, expert_shard)) /
         p.pp;
}

}  // namespace stagecraft::planner

namespace stagecraft::planner {

double iteration_time_lower_bound_s(const schedules::Schedule& lowered, const costmodel::CostTable& costs) {
  using schedules::Op;
  double busiest = 0;
  for (const auto& list : lowered.actions) {
    double busy = 0;
    for (const schedules::Action& a : list) {
      if (a.stage < 0 || a.stage >= static_cast<int>(costs.stages.size())) continue;
      const costmodel::StageCost& sc = costs.stages[static_cast<size_t>(a.stage)];
      if (a.op == Op::F) busy += sc.f_s;
      if (a.op == Op::B) busy += sc.b_s;
      if (a.op == Op::I) busy += sc.i_s;
      if (a.op == Op::W) busy += sc.w_s;
    }
    busiest = std::max(busiest, busy);
  }
  return kTimeBoundShare * busiest;
}

}  // namespace stagecraft::planner
