// Fully sharded data parallelism (plan.zero = 3, costmodel/fsdp.h; docs/costmodel.md "FSDP"):
// each unit gathered before its forward and again before its backward (or kept), its gradients
// reduce-scattered after its backward, the next unit's collective behind the current unit's
// compute; hybrid sharding inside a shard group. Closed forms by hand for the passes, the
// counts, the bytes and the memory; refusals naming the field. The simulator and the planner agree
// with the evaluator in test_routes; the planner picks it where only sharded parameters fit
// (test_planner).
#include <gtest/gtest.h>

#include <string>

#include "costmodel/comm.h"
#include "costmodel/estimate.h"
#include "costmodel/fsdp.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/topology.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

std::vector<FsdpUnit> uniform(int n, double c, double g, double r) { return std::vector<FsdpUnit>(static_cast<size_t>(n), {c, g, r}); }

// llama3-8b on one node of eight H100s: dp 8, each microbatch one sequence of 8,192 tokens.
ParallelPlan dp8(int zero, int microbatches = 2) {
  ParallelPlan p = test::plan_of(8, 1, 1, microbatches);
  p.zero = zero;
  p.recompute = RecomputePolicy::Full;
  return p;
}

ClusterSpec h100(int nodes) { return test::cluster_of("h100-ib-1024", nodes); }

}  // namespace

// Compute-bound: only the first gather (and, backward, the last reduce-scatter) shows; link-bound:
// the link carries every collective back to back.
TEST(Fsdp, PassClosedForms) {
  EXPECT_DOUBLE_EQ(fsdp_pass_s(uniform(4, 1.0, 0.5, 0)), 0.5 + 4 * 1.0);
  EXPECT_DOUBLE_EQ(fsdp_pass_s(uniform(4, 1.0, 2.0, 0)), 4 * 2.0 + 1.0);  // n g + c
  EXPECT_DOUBLE_EQ(fsdp_pass_s(uniform(4, 1.0, 0.5, 0.3)), 0.5 + 4 * 1.0 + 0.3);
  EXPECT_DOUBLE_EQ(fsdp_pass_s(uniform(3, 0.5, 1.0, 1.0)), 3 * (1.0 + 1.0));
  EXPECT_DOUBLE_EQ(fsdp_pass_s(uniform(5, 1.0, 0, 0)), 5.0);  // nothing to gather: compute alone
  EXPECT_DOUBLE_EQ(fsdp_pass_s({}), 0.0);
}

// Per unit and microbatch: two all-gathers and one reduce-scatter, or one and one when the units
// stay gathered; the bytes are one GPU's parameters at 16 bits and its gradients.
TEST(Fsdp, CollectiveCountsAndBytesByHand) {
  const ModelSpec m = load_model("llama3-8b");
  for (bool reshard : {true, false}) {
    SCOPED_TRACE(reshard);
    ParallelPlan p = dp8(3);
    p.reshard_after_forward = reshard;
    const Estimate e = estimate(m, h100(1), p);
    const FsdpStage& f = e.costs.stages.at(0).fsdp;
    const int units = m.num_layers + 2;  // embedding, layers, head
    EXPECT_EQ(f.units, units);
    EXPECT_EQ(f.gathers_f, units);
    EXPECT_EQ(f.gathers_b, reshard ? units : 0);
    EXPECT_EQ(f.reduce_scatters, units);
    const double params = e.costs.params.at(0);
    EXPECT_NEAR(f.gather_bytes, params * m.bytes_per_param, 1e-6 * params);
    EXPECT_NEAR(f.scatter_bytes, params * grad_bytes_per_param(m), 1e-6 * params);
    const nlohmann::json j = to_json(e).at("fsdp_stages").at(0);
    EXPECT_EQ(j.at("all_gathers_per_iteration"), (reshard ? 2 : 1) * units * p.num_microbatches);
    EXPECT_EQ(j.at("reduce_scatters_per_iteration"), units * p.num_microbatches);
    // Nothing left for the iteration's end: no all-reduce, no gather after the step.
    EXPECT_EQ(e.costs.stages.at(0).reduce_grad_s, 0);
    EXPECT_EQ(e.costs.param_gather_s.at(0), 0);
  }
  EXPECT_FALSE(to_json(estimate(m, h100(1), dp8(1))).contains("fsdp_stages"));
}

// What the collectives add to the stage's passes is what fsdp_pass_s leaves exposed; with a
// compute-bound layer on NVSwitch, little more than the first unit's gather.
TEST(Fsdp, ExposedCollectivesAreInTheDurations) {
  const ModelSpec m = load_model("llama3-8b");
  const Estimate e1 = estimate(m, h100(1), dp8(1)), e3 = estimate(m, h100(1), dp8(3));
  const StageCost &s1 = e1.costs.stages.at(0), &s3 = e3.costs.stages.at(0);
  EXPECT_NEAR(s3.f_s - s1.f_s, s3.fsdp.exposed_f_s, 1e-12);
  EXPECT_NEAR(s3.b_s - s1.b_s, s3.fsdp.exposed_b_s, 1e-12);
  const Topology topo(h100(1), dp8(3));
  const double embed_gather = all_gather_s(memory::embedding_params_per_rank(m, 1) * m.bytes_per_param, topo.allreduce_path(kDp));
  // The lower bound by hand (comm.h): V h x 2 bytes gathered over 8 GPUs of one node,
  // 7/8 x 1.05 GB / (450 GB/s x 0.82) + 7 x 2 us = 2.51 ms.
  ASSERT_NEAR(embed_gather, 7.0 / 8 * 128256 * 4096 * 2 / (450e9 * 0.82) + 7 * 2e-6, 1e-12);
  EXPECT_GE(s3.fsdp.exposed_f_s, embed_gather - 1e-12);
  EXPECT_LT(s3.fsdp.exposed_f_s, 0.05 * s3.f_s);
}

// Static memory: (4 + g + 8)/S bytes per parameter (32-bit master shard, gradient shard, Adam
// moments), S the shard group; without resharding the 16-bit units stay as well. The backward's
// working set holds two gathered units and two units' gradients, the largest units' (the head:
// V x h and the final norm).
TEST(Fsdp, MemoryByHand) {
  const ModelSpec m = load_model("llama3-8b");
  const double g = grad_bytes_per_param(m);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 3, 8), (4 + g + 8) / 8);
  const Estimate e = estimate(m, h100(1), dp8(3));
  const double params = e.costs.params.at(0);
  EXPECT_NEAR(e.costs.static_bytes.at(0), params * (4 + g + 8) / 8, 1);
  const double largest = memory::head_params_per_rank(m, 1);  // the tied embedding's copy and the final norm
  ASSERT_GT(largest, memory::layer_params_per_rank(m, 1));
  EXPECT_NEAR(e.costs.stages.at(0).fsdp.gathered_bytes, 2 * largest * (m.bytes_per_param + g), 1);
  const Estimate z1 = estimate(m, h100(1), dp8(1));
  EXPECT_NEAR(e.costs.stages.at(0).work_bytes - z1.costs.stages.at(0).work_bytes, 2 * largest * (m.bytes_per_param + g), 1);

  ParallelPlan kept = dp8(3);
  kept.reshard_after_forward = false;
  EXPECT_NEAR(estimate(m, h100(1), kept).costs.static_bytes.at(0), params * ((4 + g + 8) / 8 + m.bytes_per_param), 1);
}

// Hybrid sharding over two nodes: shards of 8 inside each node, the two copies all-reducing
// their shard's gradients across the network once per iteration; memory divided by 8, not 16.
TEST(Fsdp, HybridShardingByHand) {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = h100(2);
  ParallelPlan full = test::plan_of(16, 1, 1, 2), hybrid = full;
  full.zero = hybrid.zero = 3;
  full.recompute = hybrid.recompute = RecomputePolicy::Full;
  hybrid.shard_group = 8;
  const Estimate ef = estimate(m, c, full), eh = estimate(m, c, hybrid);
  const double params = eh.costs.params.at(0), g = grad_bytes_per_param(m);
  EXPECT_NEAR(eh.costs.static_bytes.at(0), params * (4 + g + 8) / 8, 1);
  EXPECT_NEAR(ef.costs.static_bytes.at(0), params * (4 + g + 8) / 16, 1);
  const Topology topo(c, hybrid);
  const AllReducePath replicas = topo.allreduce_path(kDp, 2, 8);
  EXPECT_EQ(replicas.flat.kind, "inter-node");
  EXPECT_EQ(topo.allreduce_path(kDp, 8, 1).flat.kind, "intra-node");
  EXPECT_NEAR(eh.costs.stages.at(0).reduce_grad_s, allreduce_s(params * g / 8, replicas), 1e-12);
  EXPECT_EQ(ef.costs.stages.at(0).reduce_grad_s, 0);
  // The shard group's gathers stay on NVSwitch: less exposed than over the network.
  EXPECT_LT(eh.costs.stages.at(0).fsdp.exposed_f_s, ef.costs.stages.at(0).fsdp.exposed_f_s);
}

TEST(Fsdp, RefusalsNameTheField) {
  ParallelPlan p = dp8(4);
  EXPECT_NE(error_of([&] { check(p); }).find("plan.zero = 4"), std::string::npos) << error_of([&] { check(p); });
  p = dp8(1);
  p.shard_group = 4;
  EXPECT_NE(error_of([&] { check(p); }).find("shard_group"), std::string::npos);
  p = dp8(3);
  p.shard_group = 3;
  EXPECT_NE(error_of([&] { check(p); }).find("divisor of dp = 8"), std::string::npos);
  p = dp8(1);
  p.reshard_after_forward = false;
  EXPECT_NE(error_of([&] { check(p); }).find("reshard_after_forward"), std::string::npos);
  p = dp8(3);
  p.overlap_param_gather = true;
  EXPECT_NE(error_of([&] { check(p); }).find("overlap_param_gather"), std::string::npos);
  // FP8 with zero 3 is priced (the FP8 parameter all-gather; tests/test_fp8_recipes.cpp), not refused.
  const ModelSpec m = test::model_with_fp8("llama3-8b", true);
  EXPECT_EQ(error_of([&] { estimate(m, h100(1), dp8(3)); }), "no error");
  // The JSON keeps the fields only with zero 3, and reads them back.
  ParallelPlan h = test::plan_of(16, 1, 1, 2);
  h.zero = 3;
  h.shard_group = 8;
  h.reshard_after_forward = false;
  const ParallelPlan back = plan_from_json(to_json(h));
  EXPECT_EQ(back.shard_group, 8);
  EXPECT_FALSE(back.reshard_after_forward);
  EXPECT_FALSE(to_json(dp8(1)).contains("shard_group"));
}
