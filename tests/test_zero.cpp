// The distributed optimizer (plan.zero): memory of sharded states and gradients, the reduce-
// scatter and parameter all-gather that replace the all-reduce, the smaller optimizer step, and
// where the evaluator places them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "costmodel/comm.h"
#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/topology.h"
#include "helpers.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using test::error_of;

namespace {
ParallelPlan plan(int dp, int tp, int pp, int zero) {
  ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.num_microbatches = 2 * pp;
  p.zero = zero;
  return p;
}

ClusterSpec two_nodes() {  // 2 nodes x 4 H100, a NIC per GPU
  ClusterSpec c = load_cluster("h100-nvl-ib-64");
  c.nodes = 2;
  c.gpus_per_node = 4;
  c.nics_per_node = 4;
  return c;
}
}  // namespace

// ZeRO (Rajbhandari et al. SC20, Sec. 5.1) with 16-bit weights and gradients, a 32-bit master
// copy and two 32-bit moments (K = 12): 16 bytes per parameter, 4 + 12/dp with the optimizer
// states sharded, 2 + 14/dp with the gradients too.
TEST(Zero, StaticBytesPerParameter) {
  const ModelSpec m = load_model("gpt3-7.5b");
  ASSERT_EQ(m.bytes_per_param, 2);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m), 16);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 1, 8), 4 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 2, 8), 2 + 14.0 / 8);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 1, 1), 16);  // one replica: nothing to shard
}

TEST(Zero, CostTableShardsMemoryAndTheOptimizerStep) {
  const ModelSpec m = load_model("gpt3-7.5b");
  const ClusterSpec c = two_nodes();
  ParallelPlan p2 = plan(4, 1, 2, 2);
  p2.num_microbatches = 1;  // zero 2: no gradient accumulation (PlanFieldAndErrors)
  Estimate e0 = estimate(m, c, plan(4, 1, 2, 0)), e1 = estimate(m, c, plan(4, 1, 2, 1)), e2 = estimate(m, c, p2);
  for (int r = 0; r < 2; ++r) {
    const double params = e0.costs.params[static_cast<size_t>(r)];
    EXPECT_DOUBLE_EQ(e1.costs.static_bytes[static_cast<size_t>(r)], params * (4 + 12.0 / 4));
    EXPECT_DOUBLE_EQ(e2.costs.static_bytes[static_cast<size_t>(r)], params * (2 + 14.0 / 4));
    EXPECT_NEAR(e1.costs.optimizer_s[static_cast<size_t>(r)], e0.costs.optimizer_s[static_cast<size_t>(r)] / 4, 1e-15);
    EXPECT_EQ(e0.costs.param_gather_s[static_cast<size_t>(r)], 0);
  }
  EXPECT_LT(e2.max_memory_bytes, e1.max_memory_bytes);
  EXPECT_LT(e1.max_memory_bytes, e0.max_memory_bytes);
}

// The reduce-scatter and the all-gather are each half of the all-reduce on the same path (a
// ring's two halves, here the ring with a channel per NIC, which the all-reduce of this large
// buffer takes too), so the bytes moved per iteration are those of the all-reduce.
TEST(Zero, ReduceScatterAndAllGatherReplaceTheAllReduce) {
  const ModelSpec m = load_model("gpt3-7.5b");
  const ClusterSpec c = two_nodes();
  Estimate e0 = estimate(m, c, plan(8, 1, 1, 0)), e1 = estimate(m, c, plan(8, 1, 1, 1));
  const AllReducePath path = Topology(c, plan(8, 1, 1, 1)).allreduce_path(kDp);
  ASSERT_TRUE(path.channels());  // 4 members on each of 2 nodes
  const double bytes = e1.costs.params[0] * m.bytes_per_param;
  EXPECT_NEAR(e1.costs.stages[0].reduce_grad_s, reduce_scatter_s(bytes, path), 1e-12);
  EXPECT_NEAR(e1.costs.param_gather_s[0], all_gather_s(bytes, path), 1e-12);
  EXPECT_NEAR(e1.costs.stages[0].reduce_grad_s + e1.costs.param_gather_s[0], e0.costs.stages[0].reduce_grad_s, 1e-12);
  // The evaluator runs both on the collective stream: the same busy time as the all-reduce.
  EXPECT_NEAR(e1.eval.dp_comm_s[0], e0.eval.dp_comm_s[0], 1e-9);
}

// Megatron's distributed optimizer all-gathers the parameters inside its step: the next
// iteration's first forward waits for it. With one microbatch and one stage nothing hides
// either collective: iteration = F + B + reduce-scatter + step + all-gather.
TEST(Zero, ParameterGatherPrecedesTheNextIteration) {
  const ModelSpec m = load_model("gpt3-7.5b");
  ParallelPlan p = plan(8, 1, 1, 1);
  p.num_microbatches = 1;
  Estimate e = estimate(m, two_nodes(), p);
  const StageCost& sc = e.costs.stages[0];
  const double expect = sc.f_s + sc.b_s + sc.reduce_grad_s + e.costs.optimizer_s[0] + e.costs.param_gather_s[0];
  EXPECT_NEAR(e.eval.iteration_time_s, expect, 1e-9 * expect);
  EXPECT_NEAR(e.eval.exposed_dp_comm_s[0], sc.reduce_grad_s + e.costs.param_gather_s[0], 1e-9);
}

TEST(Zero, PlanFieldAndErrors) {
  ParallelPlan p = plan(4, 1, 2, 2);
  const std::string acc = error_of([&] { plan_from_json(to_json(p)); });  // 4 microbatches accumulate
  EXPECT_NE(acc.find("plan.zero = 2 with num_microbatches = 4 is invalid"), std::string::npos) << acc;
  EXPECT_NE(acc.find("use zero 1"), std::string::npos) << acc;
  p.num_microbatches = 1;
  EXPECT_EQ(plan_from_json(to_json(p)).zero, 2);
  nlohmann::json j = to_json(p);
  j["zero"] = 4;
  const std::string msg = error_of([&] { plan_from_json(j); });
  EXPECT_NE(msg.find("plan.zero = 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allowed: 0"), std::string::npos) << msg;
  // Chimera's chains reduce copies of a stage together: not with a sharded optimizer.
  ParallelPlan ch = plan(4, 1, 2, 1);
  ch.schedule = "chimera";
  ch.num_microbatches = 4;
  const std::string chimera = error_of([&] { estimate(load_model("gpt3-7.5b"), two_nodes(), ch); });
  EXPECT_NE(chimera.find("plan.zero = 1 is not supported with schedule 'chimera'"), std::string::npos) << chimera;
}

TEST(Zero, CliFlag) {
  const std::string bin = STAGECRAFT_BIN;
  const std::string common = " estimate --model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 8 --pp 2 --microbatches 4";
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --zero 1 > /dev/null").c_str())), 0);
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --zero 5 > /dev/null 2>&1").c_str())), 2);
}
