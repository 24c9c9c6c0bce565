#include "planner/bounds.h"

#include "costmodel/memory.h"

#include <algorithm>

namespace stagecraft::planner {

double memory_lower_bound_bytes(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p) {
  return costmodel::memory::static_lower_bound_bytes(m, p);
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
