// Collectives as NCCL runs them (costmodel/comm.h, Topology::allreduce_path): the flat ring and
// the two-level form with its cross-node rings spread over a node's NICs.
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/comm.h"
#include "costmodel/presets.h"
#include "costmodel/topology.h"

using namespace stagecraft::costmodel;

namespace {

ParallelPlan plan(int dp, int tp, int pp) {
  ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.num_microbatches = 8;
  return p;
}

ClusterSpec h100_nodes(int nodes) {
  ClusterSpec c = load_cluster("h100-nvl-ib-64");
  c.nodes = nodes;
  return c;
}

}  // namespace

TEST(Collectives, FlatPathIsTheRingFormula) {
  AllReducePath p;
  p.ranks = 4;
  p.flat = {1e9, 1e-5, "inter-node"};
  EXPECT_DOUBLE_EQ(allreduce_s(8e9, p), ring_allreduce_s(8e9, 4, p.flat));
  EXPECT_NEAR(allreduce_bytes(allreduce_s(8e9, p), p), 8e9, 1e-3);
  EXPECT_DOUBLE_EQ(allreduce_latency_s(p), 6e-5);
  EXPECT_EQ(allreduce_s(8e9, AllReducePath{}), 0);  // one rank: nothing to reduce
}

TEST(Collectives, TwoLevelPathSumsItsThreePhases) {
  AllReducePath p;
  p.ranks = 48;
  p.local = 8;
  p.nodes = 6;
  p.intra = {4.5e11, 2e-6, "intra-node"};
  p.inter = {5e10, 5e-6, "inter-node"};
  p.flat = {5e10, 5e-6, "inter-node"};  // the flat ring through one NIC: slower at every size here
  const double S = 3.4e9;
  ASSERT_TRUE(allreduce_two_level(S, p));
  const double rs = 7 * (2e-6 + S / 8 / 4.5e11);           // reduce-scatter in the node
  const double cross = 2 * 5 * (5e-6 + S / 48 / 5e10);     // 8 rings over 6 nodes, S/8 each
  EXPECT_NEAR(allreduce_s(S, p), 2 * rs + cross, 1e-12);
  EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p), S, 1e-3);
  EXPECT_LT(allreduce_bytes(0.5 * allreduce_latency_s(p), p), 0);  // below the latency: no buffer
}

// The case: dp 48 over 6 nodes of 8 H100s with 8 NICs. Each node holds 8 members of the
// one group: two-level, 8 cross-node rings, one per NIC.
TEST(Collectives, DpGroupOverSixNodesIsTwoLevelWithANicPerRing) {
  ClusterSpec c = h100_nodes(6);
  Topology t(c, plan(48, 1, 1));
  AllReducePath p = t.allreduce_path(kDp);
  ASSERT_TRUE(p.two_level());
  EXPECT_EQ(p.local, 8);
  EXPECT_EQ(p.nodes, 6);
  EXPECT_EQ(p.intra.kind, "intra-node");
  EXPECT_DOUBLE_EQ(p.intra.bandwidth_Bps, c.intra_node_achieved_Bps());
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_Bps, c.inter_node_achieved_Bps());
  // About 5x faster than the flat ring through one NIC for a 1.7B model's 16-bit gradients.
  const double S = 3.4e9;
  EXPECT_LT(allreduce_s(S, p), 0.25 * ring_allreduce_s(S, 48, p.flat));
}

TEST(Collectives, CrossNodeRingsShareFewerNics) {
  ClusterSpec c = h100_nodes(6);
  c.nics_per_node = 2;  // 8 rings through 2 NICs: 4 flows each
  AllReducePath p = Topology(c, plan(48, 1, 1)).allreduce_path(kDp);
  ASSERT_TRUE(p.two_level());
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
}

TEST(Collectives, FlatWhereTheGroupHasOneMemberPerNodeOrStaysInOne) {
  ClusterSpec c = h100_nodes(6);
  // tp 8 fills each node: every dp group has one member per node.
  AllReducePath across = Topology(c, plan(6, 8, 1)).allreduce_path(kDp);
  EXPECT_FALSE(across.two_level());
  EXPECT_EQ(across.flat.kind, "inter-node");
  // dp 8 inside one node.
  AllReducePath inside = Topology(c, plan(8, 1, 6)).allreduce_path(kDp);
  EXPECT_FALSE(inside.two_level());
  EXPECT_EQ(inside.flat.kind, "intra-node");
  // dp 12 over 6 nodes with tp 4: 2 members per node in each group, 4 groups per node, 8 rings
  // through 8 NICs.
  AllReducePath mixed = Topology(c, plan(12, 4, 1)).allreduce_path(kDp);
  ASSERT_TRUE(mixed.two_level());
  EXPECT_EQ(mixed.local, 2);
  EXPECT_DOUBLE_EQ(mixed.inter.bandwidth_Bps, c.inter_node_achieved_Bps());
}

// merak-3090-64: 4 GPUs and one NIC per node. With tp 2 a dp 8 group has 2 members on each of
// 4 nodes, and 2 groups share each node. Two-level would push 4 cross-node rings through the one
// NIC (1/4 of it each) after a PCIe phase; the flat ring crosses it once per group (1/2 each)
// and is faster, so NCCL's choice, and ours, is the flat ring.
TEST(Collectives, FlatRingWinsWhereOneNicWouldCarryEveryCrossNodeRing) {
  ClusterSpec c = load_cluster("merak-3090-64");
  AllReducePath p = Topology(c, plan(8, 2, 4)).allreduce_path(kDp);
  ASSERT_TRUE(p.two_level());
  EXPECT_EQ(p.local, 2);
  EXPECT_EQ(p.nodes, 4);
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
  EXPECT_DOUBLE_EQ(p.flat.bandwidth_Bps, std::min(c.intra_node_achieved_Bps(), c.inter_node_achieved_Bps() / 2));
  const double S = 1.4e9;
  EXPECT_FALSE(allreduce_two_level(S, p));
  EXPECT_DOUBLE_EQ(allreduce_s(S, p), ring_allreduce_s(S, 8, p.flat));
  EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p), S, 1e-3);
}

// The inverse of the chosen (lower) form: bytes -> time -> bytes on both sides of a crossover.
TEST(Collectives, InverseFollowsTheChoiceAcrossSizes) {
  AllReducePath p;
  p.ranks = 16;
  p.local = 2;
  p.nodes = 8;
  p.intra = {1e10, 1e-3, "intra-node"};  // two-level: more latency (3.4 ms against 3 ms) ...
  p.inter = {1e10, 1e-4, "inter-node"};  // ... and less time per byte (1.9e-10 s against 3.1e-10 s)
  p.flat = {6e9, 1e-4, "inter-node"};
  const double small = 1e3, large = 1e10;
  EXPECT_NE(allreduce_two_level(small, p), allreduce_two_level(large, p));
  for (double S : {small, 1e6, 1e8, large}) EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p) / S, 1.0, 1e-9) << S;
}
