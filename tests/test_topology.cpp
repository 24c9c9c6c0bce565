// Rank placement and link selection on cluster presets.
#include <gtest/gtest.h>

#include "presets/load.h"
#include "costmodel/topology.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {
ParallelPlan plan(int dp, int tp, int pp, const char* order = "tp-dp-pp") {
  ParallelPlan p = stagecraft::test::plan_of(dp, tp, pp, 8);
  p.rank_order = order;
  return p;
}
}  // namespace

TEST(Topology, RankOrderTpFastest) {
  Topology t(load_cluster("merak-3090-64"), plan(2, 4, 8));
  EXPECT_EQ(t.global_rank({1, 0, 0}), 1);
  EXPECT_EQ(t.global_rank({0, 1, 0}), 4);
  EXPECT_EQ(t.global_rank({0, 0, 1}), 8);
  for (int g = 0; g < 64; ++g) EXPECT_EQ(t.global_rank(t.coords(g)), g);
  Topology u(load_cluster("merak-3090-64"), plan(2, 4, 8, "pp-dp-tp"));
  EXPECT_EQ(u.global_rank({0, 0, 1}), 1);
  EXPECT_EQ(u.global_rank({1, 0, 0}), 16);
}

TEST(Topology, LinksOnMerakCluster) {
  ClusterSpec c = load_cluster("merak-3090-64");  // 4 x RTX 3090 per node, PCIe, one 100 Gb/s NIC
  Topology t(c, plan(2, 4, 8));
  Link tp = t.group_link(kTp);
  EXPECT_EQ(tp.kind, "intra-node");
  EXPECT_DOUBLE_EQ(tp.bandwidth_Bps, c.intra_node_achieved_Bps());
  // dp pairs are 4 ranks apart: different nodes; 4 dp rings cross each node's single NIC.
  Link dp = t.group_link(kDp);
  EXPECT_EQ(dp.kind, "inter-node");
  EXPECT_DOUBLE_EQ(dp.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
  // Pipeline neighbours are 8 ranks apart; the node's 4 ranks of a stage send together.
  Link pp = t.p2p_link(0, 1);
  EXPECT_EQ(pp.kind, "inter-node");
  EXPECT_DOUBLE_EQ(pp.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
  EXPECT_EQ(t.group_link(kPp).kind, "inter-node");
}

TEST(Topology, IntraNodePipelineAndFastGroups) {
  ClusterSpec c = load_cluster("oases-3090-nvlink-32");  // NVLink-bridged pairs
  Topology t(c, plan(8, 2, 2, "tp-pp-dp"));
  EXPECT_EQ(t.group_link(kTp).kind, "fast-group");
  EXPECT_DOUBLE_EQ(t.group_link(kTp).bandwidth_Bps, c.fast_group_achieved_Bps());
  EXPECT_EQ(t.p2p_link(0, 1).kind, "intra-node");
  EXPECT_EQ(t.p2p_link(1, 1).kind, "self");
}

TEST(Topology, ManyNicsAreShared) {
  ClusterSpec c = load_cluster("h100-nvl-ib-64");  // 8 NICs per node
  Topology t(c, plan(8, 8, 1));
  Link dp = t.group_link(kDp);  // 8 rings through 8 NICs: one NIC each
  EXPECT_EQ(dp.kind, "inter-node");
  EXPECT_DOUBLE_EQ(dp.bandwidth_Bps, c.inter_node_achieved_Bps());
}

// The bus-bandwidth efficiency of each link kind scales what every hop gets: nominal times
// efficiency, in the pipeline's links and in the collectives' paths alike.
TEST(Topology, LinksGetTheirKindsBusEfficiency) {
  auto c = load_cluster("h100-nvl-ib-64");
  EXPECT_DOUBLE_EQ(c.intra_node_bus_efficiency, 0.82);
  EXPECT_DOUBLE_EQ(c.inter_node_bus_efficiency, 0.94);
  ParallelPlan p;
  p.tp = 8;
  p.pp = 2;
  Topology t(c, p);
  EXPECT_DOUBLE_EQ(t.group_link(kTp).bandwidth_Bps, 0.82 * c.intra_node_bandwidth_Bps);
  EXPECT_DOUBLE_EQ(t.p2p_link(0, 1).bandwidth_Bps, 0.94 * c.inter_node_bandwidth_Bps);
  c.intra_node_bus_efficiency = c.inter_node_bus_efficiency = 1;
  Topology nominal(c, p);
  EXPECT_DOUBLE_EQ(nominal.group_link(kTp).bandwidth_Bps, c.intra_node_bandwidth_Bps);
}
