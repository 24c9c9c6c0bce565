// The simulator's reductions (sim/symmetry.h) against the full simulation (SimOptions::symmetry
// false): one block of data-parallel replicas standing for all, and the inner schedules of
// isolated tensor-parallel groups priced once. They must agree within 0.5% on the iteration
// time, every rank's peak memory and exposed communication of each kind, for every registered
// schedule, every tp overlap mode, bucketed reduction, ZeRO, a cluster whose NICs are shared
// unevenly, and at 64, 512 and 4,096 GPUs; and fall back to the full simulation where the
// placement does not repeat.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"
#include "sim/simulate.h"
#include "tests/helpers.h"
#include "tests/sim_helpers.h"

namespace stagecraft {
namespace {

using costmodel::ParallelPlan;

costmodel::ClusterSpec cluster(int gpus_per_node, int nics_per_node, int gpus) { return test::h100_shaped(gpus_per_node, nics_per_node, gpus); }

struct Both {
  sim::SimResult reduced, full;
};

Both simulate_both(const costmodel::Estimate& e, sim::SimOptions o = {}) {
  o.iterations = 2;
  Both b;
  b.reduced = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  o.symmetry = false;
  b.full = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  return b;
}

void expect_agree(const Both& b, const std::string& what) {
  const double T = b.full.eval.iteration_time_s, tol = 0.005 * T;
  EXPECT_NEAR(b.reduced.eval.iteration_time_s, T, tol) << what;
  ASSERT_EQ(b.reduced.eval.peak_memory_bytes.size(), b.full.eval.peak_memory_bytes.size()) << what;
  for (size_t r = 0; r < b.full.eval.peak_memory_bytes.size(); ++r) {
    EXPECT_NEAR(b.reduced.eval.peak_memory_bytes[r], b.full.eval.peak_memory_bytes[r], 0.005 * b.full.eval.peak_memory_bytes[r])
        << what << " rank " << r;
    EXPECT_NEAR(b.reduced.exposed_pp_comm_s[r], b.full.exposed_pp_comm_s[r], tol) << what << " rank " << r;
    EXPECT_NEAR(b.reduced.eval.exposed_dp_comm_s[r], b.full.eval.exposed_dp_comm_s[r], tol) << what << " rank " << r;
    EXPECT_NEAR(b.reduced.exposed_tp_comm_s[r], b.full.exposed_tp_comm_s[r], tol) << what << " rank " << r;
    EXPECT_NEAR(b.reduced.exposed_ep_comm_s[r], b.full.exposed_ep_comm_s[r], tol) << what << " rank " << r;
  }
  EXPECT_EQ(b.full.dp_copies, 1) << what;
  EXPECT_EQ(b.full.symmetry_off_because, "asked for (--no-symmetry)") << what;
}

// 64 GPUs, two per node: tp 2 fills a node, so dp 16 spans 16 nodes; the gradients take rings,
// so 2 replicas (2 nodes) stand for the 16.
TEST(SimSymmetry, EveryScheduleAgreesWithTheFullSimulation) {
  const auto model = presets::load_model("gpt3-7.5b");
  int reduced = 0;
  for (const auto& g : schedules::generators()) {
    ParallelPlan p = test::plan_of(16, 2, 2, 4);
    p.schedule = g.name;
    costmodel::Estimate e;
    try {
      e = costmodel::estimate(model, cluster(2, 1, 64), p);
    } catch (const InputError&) {
      continue;  // the generator refuses this configuration
    }
    const Both b = simulate_both(e);
    expect_agree(b, g.name);
    EXPECT_EQ(b.reduced.dp_copies, 8) << g.name;
    EXPECT_EQ(b.reduced.simulated_gpus, 8) << g.name;
    reduced += b.reduced.dp_copies > 1;
  }
  EXPECT_GE(reduced, 10);
}

// tp 8 fills a node: every overlap mode's inner schedules are priced once per stage and op.
TEST(SimSymmetry, EveryTpOverlapModeAgrees) {
  const auto model = presets::load_model("gpt3-7.5b");
  for (auto mode : {schedules::TpOverlap::Merak, schedules::TpOverlap::CrossPass, schedules::TpOverlap::Oases,
                    schedules::TpOverlap::Te}) {
    ParallelPlan p = test::plan_of(4, 8, 2, 4);
    p.tp_overlap = mode;
    p.sequence_parallel = true;
    p.microbatch_size = 2;
    p.recompute = costmodel::RecomputePolicy::Full;
    if (mode == schedules::TpOverlap::Te) p.stack = "megatron-core-te";
    const costmodel::Estimate e = costmodel::estimate(model, cluster(8, 8, 64), p);
    const Both b = simulate_both(e);
    const std::string what(schedules::tp_overlap_name(mode));
    expect_agree(b, what);
    EXPECT_LT(b.reduced.activities * 5, b.full.activities) << what;  // the pieces left the engine
  }
  sim::SimOptions inner;
  inner.inner_blocking = true;  // blocking stages run their inner schedules too
  const costmodel::Estimate e = costmodel::estimate(model, cluster(8, 8, 64), test::plan_of(4, 8, 2, 4));
  expect_agree(simulate_both(e, inner), "blocking, inner schedules");
}

TEST(SimSymmetry, BucketsZeroAndPreemptionAgree) {
  const auto model = presets::load_model("gpt3-7.5b");
  struct Case {
    std::string what;
    ParallelPlan plan;
  };
  std::vector<Case> cases;
  ParallelPlan p = test::plan_of(16, 2, 2, 4);
  p.overlap_grad_reduce = true;
  p.grad_bucket_bytes = 400.0 * 1024 * 1024;  // a few buckets per stage (25 MiB: about 80)
  cases.push_back({"buckets", p});
  p.zero = 1;
  p.overlap_param_gather = true;
  cases.push_back({"zero 1, buckets, overlapped gather", p});
  p = test::plan_of(32, 2, 1, 4);
  p.zero = 3;
  cases.push_back({"zero 3", p});
  p.shard_group = 4;
  cases.push_back({"zero 3, hybrid sharding over 4", p});
  p = test::plan_of(16, 2, 2, 4);
  p.schedule = "fold3d-aiao";
  p.preemptive_comm = true;
  cases.push_back({"fold3d-aiao, preemptive", p});
  for (const Case& c : cases) {
    const Both b = simulate_both(costmodel::estimate(model, cluster(2, 1, 64), c.plan));
    expect_agree(b, c.what);
    EXPECT_GT(b.reduced.dp_copies, 1) << c.what;
  }
}

// Mixtral with ep 8: the routed experts' gradients reduce on expert-data-parallel groups (dp
// indices 8 apart), each kept by the block of 16 replicas on at least 2 nodes as the whole group
// spans; the all-to-alls run as flows inside each ep group of the block.
TEST(SimSymmetry, ExpertDataParallelGroupsAgree) {
  ParallelPlan p = test::plan_of(128, 2, 2, 4);
  p.ep = 8;
  p.sequence_parallel = true;
  const Both b = simulate_both(costmodel::estimate(presets::load_model("mixtral-8x7b"), cluster(2, 1, 512), p));
  expect_agree(b, "mixtral ep 8");
  EXPECT_EQ(b.reduced.dp_simulated, 16);
}

// Six GPUs and four NICs per node: GPUs 0-1 and 4-5 share NICs 0 and 1, GPUs 2-3 have NICs 2
// and 3 to themselves. The block (2 nodes of 16) keeps that sharing.
TEST(SimSymmetry, UnevenlySharedNicsAgree) {
  const auto model = presets::load_model("gpt3-7.5b");
  ParallelPlan p = test::plan_of(48, 2, 1, 4);
  const Both b = simulate_both(costmodel::estimate(model, cluster(6, 4, 96), p));
  expect_agree(b, "uneven NICs");
  EXPECT_EQ(b.reduced.dp_simulated, 6);
}

// tp 8 fills a node: dp 32 reduces its gradients in rings over 32 nodes (2 of them simulated),
// dp 256 over 256 nodes in NCCL's tree (8 simulated: at least 5).
TEST(SimSymmetry, AgreesAt512And4096Gpus) {
  const auto model = presets::load_model("gpt3-7.5b");
  for (auto [dp, kept] : {std::pair{32, 2}, std::pair{256, 8}}) {
    ParallelPlan p = test::plan_of(dp, 8, 2, 4);
    const Both b = simulate_both(costmodel::estimate(model, cluster(8, 8, dp * 16), p));
    expect_agree(b, std::to_string(dp * 16) + " GPUs");
    EXPECT_EQ(b.reduced.dp_simulated, kept) << dp * 16 << " GPUs";
  }
}

// Small buckets take NCCL's tree across 16 nodes: the block keeps 8 of them (at least 5, where
// the double binary tree's busiest node has its 4 edges).
TEST(SimSymmetry, TreesKeepFiveNodes) {
  costmodel::ModelSpec m = presets::load_model("gpt-1.4b");
  m.num_layers = 4;
  ParallelPlan p = test::plan_of(16, 2, 1, 4);
  p.overlap_grad_reduce = true;
  p.grad_bucket_bytes = 1024 * 1024;
  const Both b = simulate_both(costmodel::estimate(m, cluster(2, 1, 32), p));
  expect_agree(b, "1 MiB buckets");
  EXPECT_EQ(b.reduced.dp_simulated, 8);
}

// Where the placement does not repeat, every replica is simulated, and the reason is given.
TEST(SimSymmetry, FallsBackWherePlacementDoesNotRepeat) {
  const auto model = presets::load_model("gpt3-7.5b");
  ParallelPlan p = test::plan_of(13, 2, 1, 4);  // 26 GPUs: the last of 4 nodes in part
  const costmodel::Estimate e = costmodel::estimate(model, cluster(8, 8, 26), p);
  const Both b = simulate_both(e);
  expect_agree(b, "26 GPUs");
  EXPECT_EQ(b.reduced.dp_copies, 1);
  EXPECT_EQ(b.reduced.symmetry_off_because, "the plan fills its last node in part");
  p = test::plan_of(4, 2, 1, 4);  // dp fastest: every node holds every replica
  p.rank_order = "dp-tp-pp";
  const Both c = simulate_both(costmodel::estimate(model, cluster(8, 8, 8), p));
  expect_agree(c, "dp-tp-pp");
  EXPECT_EQ(c.reduced.dp_copies, 1);
  EXPECT_EQ(c.reduced.symmetry_off_because, "no smaller block of replicas repeats over the nodes");
}

}  // namespace
}  // namespace stagecraft
