// Collectives as NCCL runs them (costmodel/comm.h, Topology::allreduce_path): the flat ring, the
// ring with a channel per member's NIC, and the double binary tree.
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/comm.h"
#include "presets/load.h"
#include "costmodel/topology.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::path_over_nodes;

namespace {

ParallelPlan plan(int dp, int tp, int pp) { return stagecraft::test::plan_of(dp, tp, pp, 8); }

ClusterSpec h100_nodes(int nodes) { return stagecraft::test::cluster_of("h100-nvl-ib-64", nodes); }

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

TEST(Collectives, ChannelRingIsPipelinedOverEveryNic) {
  // The flat ring through one NIC: slower at every size here.
  const AllReducePath p = path_over_nodes(8, 6, {4.5e11, 2e-6, "intra-node"}, {5e10, 5e-6, "inter-node"}, {5e10, 5e-6, "inter-node"});
  const double S = 3.4e9;
  ASSERT_EQ(allreduce_algorithm(S, p), AllReduceAlgo::Channels);
  // 94 steps, 10 of them across nodes; a NIC carries 2(n-1)/n S/8, a port 2(n-1)/n S 7/8.
  const double latency = 84 * 2e-6 + 10 * 5e-6;
  const double per_byte = 2.0 * 47 / 48 * std::max(7.0 / (8 * 4.5e11), 1.0 / (8 * 5e10));
  EXPECT_NEAR(allreduce_s(S, p), latency + S * per_byte, 1e-12);
  EXPECT_NEAR(allreduce_latency_s(S, p), latency, 1e-15);
  EXPECT_NEAR(reduce_scatter_s(S, p), (latency + S * per_byte) / 2, 1e-12);
  EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p), S, 1e-3);
  EXPECT_LT(allreduce_bytes(0.5 * allreduce_latency_s(p), p), 0);  // below the latency: no buffer
}

// NCCL's double binary tree: log-depth latency, so it wins for small buffers over many nodes;
// reduce-scatter and all-gather stay rings.
TEST(Collectives, TreeWinsSmallBuffersOverManyNodes) {
  const Link inter{4.7e10, 5e-6, "inter-node"};
  const AllReducePath p = path_over_nodes(1, 128, {}, inter, inter);  // one member on each of 128 nodes (tp 8 fills a node)
  EXPECT_EQ(tree_depth(128), 7);
  EXPECT_EQ(tree_depth(6), 2);
  EXPECT_EQ(tree_depth(2), 1);
  const double small = 1e6, large = 4e9;
  ASSERT_EQ(allreduce_algorithm(small, p), AllReduceAlgo::Tree);
  EXPECT_NEAR(allreduce_s(small, p), 2 * 7 * 5e-6 + 2 * small / 4.7e10, 1e-12);
  EXPECT_NEAR(allreduce_latency_s(small, p), 7e-5, 1e-15);
  EXPECT_EQ(allreduce_algorithm(small, p, /*tree_allowed=*/false), AllReduceAlgo::Flat);
  EXPECT_DOUBLE_EQ(reduce_scatter_s(small, p), ring_allreduce_s(small, 128, p.flat) / 2);
  EXPECT_EQ(allreduce_algorithm(large, p), AllReduceAlgo::Flat);  // 2S against 2(n-1)/n S
  for (double S : {small, 1e8, large}) EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p) / S, 1.0, 1e-9) << S;
}

// Each node is an inner node of at most one of the two trees; every node but the roots has
// one parent in each.
TEST(Collectives, DoubleBinaryTreeInnerNodesAreLeavesOfTheOther) {
  for (int n : {2, 3, 5, 6, 7, 16, 127}) {
    std::vector<int> children0(static_cast<size_t>(n)), children1(static_cast<size_t>(n));
    int roots = 0;
    for (int i = 0; i < n; ++i) {
      const int p0 = double_tree_parent(i, n, 0), p1 = double_tree_parent(i, n, 1);
      roots += (p0 < 0) + (p1 < 0);
      if (p0 >= 0) ++children0[static_cast<size_t>(p0)];
      if (p1 >= 0) ++children1[static_cast<size_t>(p1)];
    }
    EXPECT_EQ(roots, 2) << n;
    for (int i = 0; i < n; ++i) {
      EXPECT_LE(children0[static_cast<size_t>(i)], 2);
      EXPECT_FALSE(children0[static_cast<size_t>(i)] > 0 && children1[static_cast<size_t>(i)] > 0) << "node " << i << " of " << n;
    }
  }
}

// The case: dp 48 over 6 nodes of 8 H100s with 8 NICs. Each node holds 8 members of the
// one group: 8 channels, each leaving a node through its own NIC.
TEST(Collectives, DpGroupOverSixNodesRunsAChannelPerNic) {
  ClusterSpec c = h100_nodes(6);
  Topology t(c, plan(48, 1, 1));
  AllReducePath p = t.allreduce_path(kDp);
  ASSERT_TRUE(p.channels());
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
  ASSERT_TRUE(p.channels());
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
}

TEST(Collectives, FlatWhereTheGroupHasOneMemberPerNodeOrStaysInOne) {
  ClusterSpec c = h100_nodes(6);
  // tp 8 fills each node: every dp group has one member per node.
  AllReducePath across = Topology(c, plan(6, 8, 1)).allreduce_path(kDp);
  EXPECT_FALSE(across.channels());
  EXPECT_TRUE(across.tree());
  EXPECT_EQ(across.flat.kind, "inter-node");
  // dp 8 inside one node.
  AllReducePath inside = Topology(c, plan(8, 1, 6)).allreduce_path(kDp);
  EXPECT_FALSE(inside.channels());
  EXPECT_FALSE(inside.tree());
  EXPECT_EQ(inside.flat.kind, "intra-node");
  // dp 12 over 6 nodes with tp 4: 2 members per node in each group, 4 groups per node, 8 rings
  // through 8 NICs.
  AllReducePath mixed = Topology(c, plan(12, 4, 1)).allreduce_path(kDp);
  ASSERT_TRUE(mixed.channels());
  EXPECT_EQ(mixed.local, 2);
  EXPECT_DOUBLE_EQ(mixed.inter.bandwidth_Bps, c.inter_node_achieved_Bps());
}

// merak-3090-64: 4 GPUs and one NIC per node. With tp 2 a dp 8 group has 2 members on each of
// 4 nodes, and 2 groups share each node. The channels push 4 crossings through the one NIC
// (1/4 of it each, S/2 each), the flat ring 2 (1/2 each, all of S): the same bytes per second,
// so the channels gain only their in-node steps' lower latency, and no form reaches past the
// NIC.
TEST(Collectives, ChannelsGainNothingWhereOneNicCarriesEveryCrossing) {
  ClusterSpec c = load_cluster("merak-3090-64");
  AllReducePath p = Topology(c, plan(8, 2, 4)).allreduce_path(kDp);
  ASSERT_TRUE(p.channels());
  EXPECT_EQ(p.local, 2);
  EXPECT_EQ(p.nodes, 4);
  EXPECT_DOUBLE_EQ(p.inter.bandwidth_Bps, c.inter_node_achieved_Bps() / 4);
  EXPECT_DOUBLE_EQ(p.flat.bandwidth_Bps, std::min(c.intra_node_achieved_Bps(), c.inter_node_achieved_Bps() / 2));
  const double S = 1.4e9;
  const double flat = ring_allreduce_s(S, 8, p.flat);
  EXPECT_LE(allreduce_s(S, p), flat);
  EXPECT_GT(allreduce_s(S, p), 0.99 * flat);
  EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p), S, 1e-3);
}

// The inverse of the chosen (lower) form: bytes -> time -> bytes on both sides of a crossover.
TEST(Collectives, InverseFollowsTheChoiceAcrossSizes) {
  // Channels: the most latency (17.4 ms; tree 2.6 ms) and the least time per byte (9.4e-11 s;
  // tree 1e-10 s).
  const AllReducePath p = path_over_nodes(2, 8, {1e10, 1e-3, "intra-node"}, {1e10, 1e-4, "inter-node"}, {6e9, 1e-4, "inter-node"});
  const double small = 1e3, large = 1e10;
  EXPECT_EQ(allreduce_algorithm(small, p), AllReduceAlgo::Tree);
  EXPECT_EQ(allreduce_algorithm(large, p), AllReduceAlgo::Channels);
  for (double S : {small, 1e6, 1e8, large}) EXPECT_NEAR(allreduce_bytes(allreduce_s(S, p), p) / S, 1.0, 1e-9) << S;
}
