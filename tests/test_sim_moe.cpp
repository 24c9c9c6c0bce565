// Expert parallelism's all-to-alls as simulator flows (sim/compute.cpp all_to_alls; explicit tp):
// every two members of an ep group exchange their share of each all-to-all once both reach it.
// The bytes each GPU sends equal the cost table's by hand, and where nothing else shares the
// links the iteration equals the evaluator's within 1% and the all-to-alls are all exposed.
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

namespace stagecraft {
namespace {

struct Case {
  int nodes, ep;  // tp 2, dp = ep, pp 1: the ep group is the whole dp group, one or two nodes
};

TEST(SimMoe, AllToAllFlowsCarryTheCostTablesBytesAndAgreeWithTheEvaluator) {
  for (const Case c : {Case{1, 4}, Case{2, 8}}) {
    SCOPED_TRACE("ep " + std::to_string(c.ep));
    const costmodel::Estimate e =
        costmodel::estimate(test::small_mixtral(), test::cluster_of("h100-ib-1024", c.nodes), test::moe_plan(c.ep, 1));
    const costmodel::MoeStage& moe = e.costs.stages[0].moe;
    ASSERT_EQ(moe.moe_layers, 4);
    ASSERT_EQ(moe.layer.all_to_alls_f, 2);
    // By hand (moe.h): a tp rank's s/t = 512 tokens' 2 copies of h at 16 bits; ep 4 on one node
    // sends 3/4 of them over NVSwitch (450 GB/s x 0.82, 2 us), ep 8 on two nodes of 4 members
    // 3/8 over NVSwitch and 4/8 through each GPU's NIC (50 GB/s x 0.94, 5 us), the slower deciding.
    const double copies_bytes = 512.0 * 2 * 4096 * 2, nvlink = 450e9 * 0.82, nic = 50e9 * 0.94;
    const double want_s = c.nodes == 1 ? 2e-6 + 0.75 * copies_bytes / nvlink
                                       : std::max(2e-6 + 3.0 / 8 * copies_bytes / nvlink, 5e-6 + 0.5 * copies_bytes / nic);
    ASSERT_NEAR(moe.layer.all_to_all_s, want_s, 1e-15);
    sim::SimOptions o;
    o.iterations = 2;
    o.record = true;
    const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
    // By hand: per microbatch 4 layers x (2 forward + 2 backward) all-to-alls, each sending the
    // in-node and cross-node bytes of one GPU (lane 0 of tp group 0 is GPU 0).
    const double per_a2a = moe.layer.bytes.intra_node_bytes + moe.layer.bytes.cross_node_bytes;
    const double expected = 4.0 * 4 * 4 * per_a2a;
    double sent = 0;
    int flows = 0;
    for (const sim::NetSpan& n : r.net_spans)
      if (n.kind == sim::CommKind::ExpertParallel && n.src_gpu == 0) sent += n.bytes, ++flows;
    EXPECT_NEAR(sent, expected, 1e-6 * expected);
    EXPECT_EQ(flows, 4 * 2 * (c.ep - 1));  // per microbatch one F and one B, each to every other member
    // Nothing else on the links while they run: the evaluator's time, and all of it exposed.
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
    const double a2a_s = 4.0 * 4 * 4 * moe.layer.all_to_all_s;
    EXPECT_NEAR(r.exposed_ep_comm_s[0], a2a_s, 0.02 * a2a_s);
  }
}

// Folded (--tp-comm folded), the all-to-alls stay inside the compute durations, as the evaluator.
TEST(SimMoe, FoldedKeepsThemInCompute) {
  const costmodel::Estimate e = costmodel::estimate(test::small_mixtral(), test::cluster_of("h100-ib-1024", 1), test::moe_plan(4, 1));
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Folded;
  const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  EXPECT_EQ(r.exposed_ep_comm_s[0], 0);
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
}

}  // namespace
}  // namespace stagecraft
