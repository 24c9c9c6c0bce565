// What the simulator moves and computes, derived from a cost table: the cost table gives times
// under the evaluator's links (costmodel/topology.h), and inverting those link formulas gives
// the bytes each flow carries, so any cost table (analytic, unit, profiled) can be simulated.
#pragma once

#include <vector>

#include "costmodel/costs.h"
#include "costmodel/topology.h"
#include "schedules/schedule.h"

namespace stagecraft::sim {

struct Workload {
  std::vector<double> send_f_bytes;  // (stages) per GPU, forward output to the next stage
  std::vector<double> send_b_bytes;  // (stages) per GPU, input gradient to the previous stage
  std::vector<double> reduce_bytes;  // (stages) per GPU, the whole gradient buffer of the ring
  bool reduce_scatter = false;       // distributed optimizer: REDUCE_GRAD reduce-scatters the buffer
  std::vector<double> gather_bytes;  // (ranks) per GPU, parameters all-gathered after the optimizer
                                     // step (distributed optimizer; else 0)
  std::vector<double> copy_bytes;    // (stages) per GPU, one microbatch's offload (and reload)
  std::vector<double> tp_bytes;      // (stages) per GPU, the buffer of one tensor-parallel all-reduce
  double tp_alpha_s = 0;             // latency of one tensor-parallel ring step
};

// Throws InputError when a time is shorter than its link's latency (no byte count fits).
Workload derive_workload(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                         const costmodel::ParallelPlan& p);

}  // namespace stagecraft::sim
