// Context parallelism (plan.cp, costmodel/cp.h; docs/costmodel.md "Context parallelism"): each
// rank works on s / cp tokens, its attention core on 1/cp of the whole sequence's, the key/value
// chunks passed around a ring behind the core's kernels, gradients reduced over dp x cp. Closed
// forms by hand for the exchanges, the work, the memory and the groups; refusals naming the
// field. The planner choosing cp for long sequences: test_planner.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/comm.h"
#include "costmodel/cp.h"
#include "costmodel/estimate.h"
#include "presets/load.h"
#include "costmodel/topology.h"
#include "costmodel/workload.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

ModelSpec llama(int seq) {
  ModelSpec m = load_model("llama3-8b");
  m.seq_length = seq;
  m.attention_kernel = AttentionKernel::Fused;
  return m;
}

ClusterSpec h100(int nodes) { return test::cluster_of("h100-ib-1024", nodes); }

ParallelPlan plan(int dp, int tp, int cp) {
  ParallelPlan p = test::plan_of(dp, tp, 1, 2);
  p.cp = cp;
  p.recompute = RecomputePolicy::Full;
  return p;
}

}  // namespace

// Per layer and sub-batch: K and V over cp - 1 ring steps forward, 2(cp - 1) chunks; backward
// K, V and their gradients, 4(cp - 1); each chunk (b, s/cp, h_kv/t) at 16 bits. A step shows only
// where it outlasts the core's kernel on one chunk.
TEST(ContextParallel, ExchangesAndExposureByHand) {
  const ModelSpec m = llama(32768);
  const Link ring{50e9, 5e-6, "inter-node"};
  for (int cp : {2, 4}) {
    SCOPED_TRACE(cp);
    const CpLayer c = cp_layer(cp_ring_work(m, 1, 8, cp), cp, 1.0, 2.0, ring);
    EXPECT_EQ(c.exchanges_f, 2 * (cp - 1));
    EXPECT_EQ(c.exchanges_b, 4 * (cp - 1));
    EXPECT_DOUBLE_EQ(c.chunk_bytes, 32768.0 / cp * (8 * 128) / 8 * 2);  // g = 8 heads of 128
    EXPECT_DOUBLE_EQ(c.step_f_s, 5e-6 + 2 * c.chunk_bytes / 50e9);
    EXPECT_DOUBLE_EQ(c.exposed_f_s, 0);  // a 1 s core hides every step
    const CpLayer slow = cp_layer(cp_ring_work(m, 1, 8, cp), cp, 1e-6, 2e-6, ring);
    EXPECT_DOUBLE_EQ(slow.exposed_f_s, (cp - 1) * (slow.step_f_s - 1e-6 / cp));
    EXPECT_DOUBLE_EQ(slow.exposed_b_s, (cp - 1) * (slow.step_b_s - 2e-6 / cp));
  }
  EXPECT_EQ(cp_layer(cp_ring_work(m, 1, 8, 1), 1, 1, 1, ring).exchanges_f, 0);
  EXPECT_EQ(cp_ring_work(m, 1, 8, 1).chunk_bytes, 0);
}

// Every token-wise product works on s / cp tokens; the core's FLOPs are the whole sequence's over
// cp, its kernels one chunk long.
TEST(ContextParallel, WorkIsTheRanksShare) {
  const ModelSpec m = llama(32768);
  const KernelStack& k = load_stack("megatron-lm");
  const LayerWork one = layer_work(m, k, 1, 8, false, false), two = layer_work(m, k, 1, 8, false, false, 2);
  EXPECT_DOUBLE_EQ(two.mlp_f.gemms[0].m, one.mlp_f.gemms[0].m / 2);
  EXPECT_DOUBLE_EQ(two.attn_f.gemms[0].m, one.attn_f.gemms[0].m / 2);
  EXPECT_DOUBLE_EQ(two.core.f.model_flops, one.core.f.model_flops / 2);
  EXPECT_DOUBLE_EQ(two.core.i.model_flops, one.core.i.model_flops / 2);
  // 4bs^2h / t (flops.h) halved for causal: 2 x s^2 x 32/8 heads x (128 + 128) / 2 = 1024 s^2.
  ASSERT_DOUBLE_EQ(one.core.f.flash_flops, 1024.0 * 32768 * 32768);
  EXPECT_DOUBLE_EQ(two.core.f.flash_flops, one.core.f.flash_flops / 2);  // causal: half of each, balanced
  EXPECT_EQ(two.seq_length, 16384);
}

// Activations are linear in the tokens with a fused core: cp 2 keeps half of cp 1 (the ring's
// chunk buffers aside, in the backward's working set); static memory is the same, the gradients
// reduced over dp x cp.
TEST(ContextParallel, MemoryAndGradientGroupByHand) {
  const ModelSpec m = llama(32768);
  const ClusterSpec c = h100(2);
  const Estimate e1 = estimate(m, c, plan(2, 8, 1)), e2 = estimate(m, c, plan(1, 8, 2));
  const StageCost &s1 = e1.costs.stages.at(0), &s2 = e2.costs.stages.at(0);
  EXPECT_NEAR(s2.act_bytes, s1.act_bytes / 2, 1e-6 * s1.act_bytes);
  EXPECT_NEAR(s2.ckpt_bytes, s1.ckpt_bytes / 2, 1e-6 * s1.ckpt_bytes);
  EXPECT_EQ(e1.costs.static_bytes.at(0), e2.costs.static_bytes.at(0));
  EXPECT_NEAR(s2.work_bytes - 8 * s2.cp.chunk_bytes, 0.5 * s1.work_bytes, 1e-6 * s1.work_bytes);
  // Both reduce over two ranks across the nodes: the same all-reduce.
  const Topology t2(c, plan(1, 8, 2));
  EXPECT_EQ(t2.group_size(kDpCp), 2);
  EXPECT_NEAR(s2.reduce_grad_s, allreduce_s(s2.grad_bytes, t2.allreduce_path(kDpCp)), 1e-15);
  EXPECT_NEAR(s2.reduce_grad_s, s1.reduce_grad_s, 1e-12);
  // The same model FLOPs per sample: cp splits samples, not the batch (dp 2 runs twice as many).
  EXPECT_DOUBLE_EQ(e1.model_flops / e1.plan.global_batch(), e2.model_flops / e2.plan.global_batch());
  EXPECT_EQ(e2.plan.global_batch(), 2);
  // A GPU of cp 2 runs half the tokens of one of dp 2 (and half the causal core): its passes take
  // half the time (the ring hidden behind a 16k-token core, kernels as efficient at half the
  // length), the reduction and the optimizer step the same.
  auto passes_s = [](const Estimate& e) { return e.eval.iteration_time_s - e.costs.stages.at(0).reduce_grad_s - e.costs.optimizer_s.at(0); };
  EXPECT_NEAR(passes_s(e2) / passes_s(e1), 0.5, 0.02);
}

// Ranks are numbered tp fastest, then cp (where the order does not name it), dp, pp; the
// gradients' group runs over dp and cp together.
TEST(ContextParallel, RankPlacement) {
  ParallelPlan p = test::plan_of(2, 2, 2, 4);
  p.cp = 2;
  const ClusterSpec c = h100(2);
  const Topology t(c, p);
  EXPECT_EQ(t.global_rank({1, 0, 0, 1}), 3);  // tp 1 + 2 x cp 1
  EXPECT_EQ(t.global_rank({0, 1, 0, 0}), 4);  // dp after cp
  EXPECT_EQ(t.global_rank({0, 0, 1, 0}), 8);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(t.global_rank(t.coords(g)), g);
  EXPECT_EQ(t.group_link(kCp).kind, "intra-node");
  EXPECT_EQ(t.group_size(kDpCp), 4);
  p.rank_order = "tp-dp-cp-pp";
  const Topology u(c, p);
  EXPECT_EQ(u.global_rank({0, 1, 0, 0}), 2);
  EXPECT_EQ(u.global_rank({0, 0, 0, 1}), 4);
  EXPECT_EQ(rank_axes("dp-tp-pp")[1], kTp);
  EXPECT_EQ(rank_axes("dp-tp-pp")[2], kCp);
}

TEST(ContextParallel, RefusalsNameTheField) {
  const ClusterSpec c = h100(2);
  ModelSpec odd = llama(32768 + 2);
  EXPECT_NE(error_of([&] { estimate(odd, c, plan(1, 8, 2)); }).find("plan.cp = 2"), std::string::npos);
  ModelSpec mat = llama(32768);
  mat.attention_kernel = AttentionKernel::Materialized;
  EXPECT_NE(error_of([&] { estimate(mat, c, plan(1, 8, 2)); }).find("--attention-kernel fused"), std::string::npos);
  ParallelPlan p = plan(1, 8, 0);
  EXPECT_NE(error_of([&] { check(p); }).find("plan.cp = 0"), std::string::npos);
  p = plan(1, 8, 2);
  p.rank_order = "tp-cp-dp";
  EXPECT_NE(error_of([&] { check(p); }).find("rank_order"), std::string::npos);
  // The JSON keeps cp only above 1, and reads it back.
  EXPECT_EQ(plan_from_json(to_json(plan(1, 8, 2))).cp, 2);
  EXPECT_FALSE(to_json(plan(1, 8, 1)).contains("cp"));
}
