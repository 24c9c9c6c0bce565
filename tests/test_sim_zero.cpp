// The distributed optimizer in the simulator: the gradient reduce-scatter at REDUCE_GRAD and the
// parameter all-gather after the optimizer step run as flows, in the evaluator's algorithm and
// placement, and agree with it where links are not shared.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

using namespace stagecraft;
using costmodel::ParallelPlan;

namespace {
ParallelPlan plan(int dp, int pp, int mb, int zero) {
  ParallelPlan p = test::plan_of(dp, 1, pp, mb);
  p.zero = zero;
  return p;
}

void expect_agreement(const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c, const ParallelPlan& p) {
  auto e = costmodel::estimate(m, c, p);
  sim::SimResult r = test::simulate_estimate(e, sim::TpComm::Folded);
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
  for (size_t i = 0; i < e.eval.dp_comm_s.size(); ++i)
    EXPECT_NEAR(r.eval.dp_comm_s[i], e.eval.dp_comm_s[i], 0.01 * e.eval.dp_comm_s[i]) << "rank " << i;
}
}  // namespace

// dp 4 over 2 nodes of 2 GPUs with a NIC each: both halves run as rings with a channel per NIC.
TEST(SimZero, ChannelRingHalvesAgreeWithTheEvaluator) {
  auto c = test::shaped("h100-nvl-ib-64", 2, 2, 2);
  expect_agreement(presets::load_model("gpt3-7.5b"), c, plan(4, 1, 1, 1));
}

// One GPU per node: flat rings; with pp 2 the reduce-scatters overlap the other stage's backward.
// (zero 1: with 4 microbatches accumulating, gradients cannot be sharded, PlanFieldAndErrors.)
TEST(SimZero, FlatHalvesWithAPipelineAgree) {
  auto c = test::shaped("h100-nvl-ib-64", 8, 1, 1);
  expect_agreement(presets::load_model("gpt3-7.5b"), c, plan(4, 2, 4, 1));
}

// Without a distributed optimizer the simulator runs no gather, and the all-reduce takes the
// same time as the two halves together.
TEST(SimZero, HalvesTogetherTakeTheAllReducesTime) {
  auto c = test::shaped("h100-nvl-ib-64", 2, 2, 2);
  auto m = presets::load_model("gpt3-7.5b");
  auto e0 = costmodel::estimate(m, c, plan(4, 1, 1, 0)), e1 = costmodel::estimate(m, c, plan(4, 1, 1, 1));
  sim::SimResult r0 = test::simulate_estimate(e0, sim::TpComm::Folded), r1 = test::simulate_estimate(e1, sim::TpComm::Folded);
  EXPECT_NEAR(r1.eval.dp_comm_s[0], r0.eval.dp_comm_s[0], 0.01 * r0.eval.dp_comm_s[0]);
  EXPECT_GT(r1.eval.iteration_time_s, r0.eval.iteration_time_s - e0.costs.optimizer_s[0]);
}

// Megatron-Core's overlapped parameter gather: the first bucket before the next forward, the
// rest beside it (the evaluator's head share and join), in both engines alike.
TEST(SimZero, OverlappedParameterGatherAgrees) {
  auto c = test::shaped("h100-nvl-ib-64", 2, 2, 2);
  for (int pp : {1, 2}) {
    ParallelPlan p = plan(2, pp, 2 * pp, 1);
    p.overlap_param_gather = true;
    p.grad_bucket_bytes = 50e6;
    auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), c, p);
    ASSERT_LT(e.costs.param_gather_head_share[0], 1);
    expect_agreement(presets::load_model("gpt3-7.5b"), c, p);
  }
}

// Hybrid sharding (zero 3, shard group 4 of dp 16, tp 8 on 16 nodes): each shard's gradients are
// all-reduced over its 4 copies (dp indices 4 apart) at REDUCE_GRAD, as flows; the evaluator's
// time within 1%, and data-parallel time where plain zero 3 has none.
TEST(SimZero, HybridShardingReducesOverTheCopies) {
  const auto m = presets::load_model("gpt3-7.5b");
  const auto c = test::cluster_of("h100-ib-1024", 16);
  ParallelPlan p = test::plan_of(16, 8, 1, 1);
  p.zero = 3;
  p.shard_group = 4;
  expect_agreement(m, c, p);
  auto e = costmodel::estimate(m, c, p);
  const sim::SimResult hsdp = test::simulate_estimate(e, sim::TpComm::Folded);
  // By hand: the shard (a quarter of the stage's gradients) all-reduced over its 4 copies, one a
  // node, each GPU its own NIC: a flat ring, 6 x 5 us + 2(n-1)/n S / (50 GB/s x 0.94) (comm.h;
  // for these hundreds of MB it beats the tree's 2 S / B).
  const double shard_bytes = e.costs.stages[0].grad_bytes / 4, want = 6 * 5e-6 + 1.5 * shard_bytes / (50e9 * 0.94);
  EXPECT_NEAR(hsdp.eval.dp_comm_s[0], want, 0.01 * want);
  p.shard_group = 0;
  e = costmodel::estimate(m, c, p);
  const sim::SimResult full = test::simulate_estimate(e, sim::TpComm::Folded);
  EXPECT_EQ(full.eval.dp_comm_s[0], 0);
}
