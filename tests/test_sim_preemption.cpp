// Preemptive communication in the simulator (FOLD3D Sec. V-A, plan.preemptive_comm): a
// pipeline transfer between nodes suspends the data-parallel flows that send from its source
// node or receive on its destination node until it ends, so it is never slowed by a gradient
// reduction. On FOLD3D's own V100 testbed the pipeline transfers then take their uncontended
// time, which is what the evaluator (no shared links) already gives them.
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

using namespace stagecraft;

namespace {

costmodel::Estimate fold3d_case(bool preemptive) {
  costmodel::ParallelPlan p = test::plan_of(4, 8, 2, 8);
  p.microbatch_size = 4;
  p.schedule = "fold3d";
  p.sequence_parallel = true;
  p.recompute = costmodel::RecomputePolicy::Full;
  p.preemptive_comm = preemptive;
  return costmodel::estimate(presets::load_model("gpt3-18b"), presets::load_cluster("fold3d-v100-64"), p);
}

sim::SimResult run(const costmodel::Estimate& e) { return test::simulate_estimate(e, sim::TpComm::Folded, true); }

// Longest inter-node pipeline flow of the reported iteration.
double longest_pipeline_flow_s(const sim::SimResult& r) {
  double worst = 0;
  for (const sim::NetSpan& n : r.net_spans)
    if (n.kind == sim::CommKind::Pipeline && n.src_gpu / 8 != n.dst_gpu / 8) worst = std::max(worst, n.end_s - n.start_s);
  return worst;
}

}  // namespace

TEST(SimPreemption, PipelineTransfersPreemptGradientReductions) {
  costmodel::Estimate fair = fold3d_case(false), pre = fold3d_case(true);
  // The evaluator has no shared links: the flag changes nothing there.
  EXPECT_DOUBLE_EQ(fair.eval.iteration_time_s, pre.eval.iteration_time_s);
  sim::SimResult a = run(fair), b = run(pre);
  // Sharing the NIC fairly, the reductions slow the pipeline transfers and the iteration.
  EXPECT_GT(a.eval.iteration_time_s, fair.eval.iteration_time_s * 1.005);
  EXPECT_GT(longest_pipeline_flow_s(a), longest_pipeline_flow_s(b) * 1.2);
  // Preempting, the transfers take their own time and the simulator meets the evaluator.
  EXPECT_LT(b.eval.iteration_time_s, a.eval.iteration_time_s);
  EXPECT_NEAR(b.eval.iteration_time_s, pre.eval.iteration_time_s, 1e-3 * pre.eval.iteration_time_s);
  double max_fair = *std::max_element(a.exposed_pp_comm_s.begin(), a.exposed_pp_comm_s.end());
  double max_pre = *std::max_element(b.exposed_pp_comm_s.begin(), b.exposed_pp_comm_s.end());
  EXPECT_LT(max_pre, max_fair);
  // Every reduction still completes: the same bytes cross the busiest link.
  EXPECT_NEAR(b.busiest_link.bytes, a.busiest_link.bytes, 1e-6 * a.busiest_link.bytes);
}

// Within one node nothing is preempted: a plan whose pipeline stays inside nodes simulates the same.
TEST(SimPreemption, NoEffectWithoutInterNodePipelineTransfers) {
  costmodel::ParallelPlan p = test::plan_of(8, 2, 4, 8);
  p.overlap_grad_reduce = true;
  p.rank_order = "pp-tp-dp";  // a pipeline of 4 x tp 2 fills one node; dp crosses nodes
  auto cl = presets::load_cluster("fold3d-v100-64");
  auto m = presets::load_model("gpt-1.4b");
  auto e1 = costmodel::estimate(m, cl, p);
  p.preemptive_comm = true;
  auto e2 = costmodel::estimate(m, cl, p);
  EXPECT_DOUBLE_EQ(run(e1).eval.iteration_time_s, run(e2).eval.iteration_time_s);
}
