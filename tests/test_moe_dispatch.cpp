// MoE token dispatchers (plan.moe_dispatcher; costmodel/moe.h): what one MoE layer exchanges per
// sub-batch under Megatron-Core's alltoall, allgather and flex (DeepEP) dispatchers, bytes and
// collective counts by hand for one layer of Qwen3-30B-A3B (h 2048, 128 experts, top 8) on one
// 8-GPU node, ep 8, one 4,096-token sample per rank; and the flag's refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/moe.h"
#include "presets/load.h"
#include "costmodel/topology.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

struct Layer {
  ModelSpec m = load_model("qwen3-30b-a3b");
  ClusterSpec c = test::cluster_of("h100-ib-1024", 1);
  ParallelPlan p;
  AllReducePath path;
  Link tp_link;
  Layer() {
    p = test::plan_of(8, 1, 1, 1);
    p.ep = 8;
    const Topology topo(c, p);
    path = topo.allreduce_path(kDpCp, 8, 1);
    tp_link = topo.group_link(kTp);
  }
  MoeDispatchWork work(const std::string& d) const { return moe_dispatch_work(m, 1, 1, 8, 1, path, d); }
};

}  // namespace

// alltoall: each of the 4,096 tokens' 8 copies of 2,048 x 2 bytes leaves the rank, 7/8 of them to
// the node's other ranks: 134,217,728 bytes, 117,440,512 over NVLink. Beside each token dispatch
// the fp32 probabilities, 4,096 x 8 x 4 = 131,072 bytes; the forward's count all-gather, 128
// experts x 8 bytes x 8 ranks = 8,192. Four NCCL calls forward (counts, tokens, probabilities,
// combine), three backward.
TEST(MoeDispatch, AllToAllBytesAndCallsByHand) {
  const Layer l;
  const MoeDispatchWork w = l.work("alltoall");
  EXPECT_DOUBLE_EQ(w.bytes.total_bytes, 134217728.0);
  EXPECT_DOUBLE_EQ(w.bytes.intra_node_bytes, 117440512.0);
  EXPECT_DOUBLE_EQ(w.bytes.cross_node_bytes, 0.0);
  EXPECT_DOUBLE_EQ(w.probs_bytes.total_bytes, 131072.0);
  EXPECT_DOUBLE_EQ(w.counts_bytes, 8192.0);
  EXPECT_EQ(w.all_to_alls_f, 2);
  EXPECT_EQ(w.collectives_f, 4);
  EXPECT_EQ(w.collectives_b, 3);
  const MoeLayer priced = price_moe_layer(w, l.path, l.tp_link);
  EXPECT_DOUBLE_EQ(priced.all_to_all_s, all_to_all_s(w.bytes, l.path));
  EXPECT_DOUBLE_EQ(priced.exposed_f_s,
                   2 * priced.all_to_all_s + all_to_all_s(w.probs_bytes, l.path) + all_gather_s(8192.0, 8, l.path.flat));
}

// flex (DeepEP): a token goes once to each rank holding one of its 8 experts, 1 - (7/8)^8 =
// 0.656391 of the 8 ranks each, carrying its 8 fp32 probabilities: 4,096 x (4,096 + 32) x 8 x
// 0.656391 bytes in all, 7 of the 8 shares to other ranks; two NCCL-free exchanges a pass.
TEST(MoeDispatch, FlexSendsEachTokenOncePerRankByHand) {
  const Layer l;
  const MoeDispatchWork w = l.work("flex");
  const double q = 1 - std::pow(7.0 / 8.0, 8);
  EXPECT_NEAR(q, 0.656391, 1e-6);
  EXPECT_DOUBLE_EQ(w.bytes.total_bytes, 4096.0 * 4128 * 8 * q);
  EXPECT_DOUBLE_EQ(w.bytes.intra_node_bytes, 4096.0 * 4128 * 7 * q);
  EXPECT_DOUBLE_EQ(w.probs_bytes.total_bytes, 0.0);
  EXPECT_EQ(w.collectives_f, 2);
  // Fewer bytes than the alltoall dispatcher's 8 copies a token: 0.656 x 4128 / 4096 of them.
  EXPECT_LT(w.bytes.intra_node_bytes, l.work("alltoall").bytes.intra_node_bytes);
}

// allgather: every rank gathers the 8 ranks' 4,096 tokens (2,048 x 2 bytes) with their routing
// map (128 x 1 byte) and fp32 probabilities (128 x 4): 32,768 x 4,736 = 155,189,248 bytes; the
// combine reduce-scatters 32,768 x 2,048 x 4 = 268,435,456.
TEST(MoeDispatch, AllGatherBuffersByHand) {
  const Layer l;
  const MoeDispatchWork w = l.work("allgather");
  EXPECT_DOUBLE_EQ(w.gather_bytes, 32768.0 * 4736);
  EXPECT_DOUBLE_EQ(w.scatter_bytes, 268435456.0);
  EXPECT_EQ(w.all_to_alls_f, 0);
  const MoeLayer priced = price_moe_layer(w, l.path, l.tp_link);
  EXPECT_DOUBLE_EQ(priced.exposed_f_s, all_gather_s(w.gather_bytes, 8, l.path.flat) +
                                           reduce_scatter_s(w.scatter_bytes, 8, l.path.flat));
}

// The dispatcher changes the estimate, and a bad name is refused naming the field and the choices.
TEST(MoeDispatch, PlanFieldChangesTheEstimateAndIsChecked) {
  Layer l;
  l.p.num_microbatches = 4;
  const double a2a = estimate(l.m, l.c, l.p).eval.iteration_time_s;
  l.p.moe_dispatcher = "flex";
  EXPECT_LT(estimate(l.m, l.c, l.p).eval.iteration_time_s, a2a);
  l.p.moe_dispatcher = "deepep";
  const std::string err = error_of([&] { check(l.p); });
  EXPECT_NE(err.find("moe_dispatcher"), std::string::npos);
  EXPECT_NE(err.find("alltoall, allgather, flex"), std::string::npos);
}

// Placement on NVLink domains: on GB200 NVL72 racks used 64 GPUs each (gpus_used_per_node), tp 4
// x ep 16 puts each expert-parallel group on 64 consecutive GPUs, one rack: the all-to-all stays
// on NVLink (nothing across racks). With all 72 GPUs of each rack in use, the second group (GPUs
// 64-127) straddles racks 0 and 1, and the groups' all-to-all is priced at the network's speed.
TEST(MoeDispatch, ExpertGroupsStayInsideAnNvl72Rack) {
  const ModelSpec m = load_model("deepseek-v3");
  ClusterSpec rack64 = load_cluster("gb200-nvl72-1152");
  rack64.nodes = 4;
  set_gpus_used_per_node(rack64, 64, "gpus_used_per_node");
  ParallelPlan p = test::plan_of(64, 4, 1, 1);
  p.ep = 16;
  p.sequence_parallel = true;
  const Topology topo(rack64, p);
  const AllReducePath path = topo.allreduce_path(expert_axis(p), 16, 1);
  EXPECT_EQ(path.nodes, 1);
  const MoeDispatchWork w = moe_dispatch_work(m, 1, 4, 16, 4, path);
  EXPECT_DOUBLE_EQ(w.bytes.cross_node_bytes, 0.0);
  // A rank's s / t = 1024 tokens' 8 copies of h = 7168 at 16 bits, 15/16 to the rack's other ep members.
  EXPECT_DOUBLE_EQ(w.bytes.intra_node_bytes, 1024.0 * 8 * 7168 * 2 * 15 / 16);
  ClusterSpec full = load_cluster("gb200-nvl72-1152");
  full.nodes = 4;
  const AllReducePath straddle = Topology(full, p).allreduce_path(expert_axis(p), 16, 1);
  // Groups placed unevenly over the racks: the slowest member's link, a NIC's (50 GB/s against
  // NVLink 5's 900 GB/s a direction), prices every group's all-to-all.
  EXPECT_LT(straddle.flat.bandwidth_Bps * 4, path.flat.bandwidth_Bps);
  EXPECT_GT(all_to_all_s(moe_dispatch_work(m, 1, 4, 16, 4, straddle).bytes, straddle), 4 * all_to_all_s(w.bytes, path));
}
