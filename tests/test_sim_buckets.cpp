// Bucketed gradient reduction in the simulator: the backward runs as pieces that end where its
// buckets are ready, each bucket's ring starts there, and the result agrees with the evaluator
// where links are not shared.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

using namespace stagecraft;

namespace {
void expect_agreement(costmodel::ClusterSpec c, const costmodel::ParallelPlan& p) {
  auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), c, p);
  sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp());
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
  for (size_t i = 0; i < e.eval.exposed_dp_comm_s.size(); ++i)
    EXPECT_NEAR(r.eval.exposed_dp_comm_s[i], e.eval.exposed_dp_comm_s[i], 0.02 * e.eval.dp_comm_s[i]) << "rank " << i;
}

costmodel::ParallelPlan plan(int dp, int pp, int mb, int zero) {
  costmodel::ParallelPlan p = test::plan_of(dp, 1, pp, mb);
  p.overlap_grad_reduce = true;
  p.grad_bucket_bytes = 200e6;
  p.zero = zero;
  return p;
}
}  // namespace

TEST(SimBuckets, FlatRingsOverlapTheBackward) {
  auto c = test::shaped("h100-nvl-ib-64", 8, 1, 1);
  expect_agreement(c, plan(4, 2, 4, 0));
}

TEST(SimBuckets, TwoLevelReduceScattersOverlapTheBackward) {
  auto c = test::shaped("h100-nvl-ib-64", 2, 2, 2);
  expect_agreement(c, plan(4, 1, 2, 1));
}
