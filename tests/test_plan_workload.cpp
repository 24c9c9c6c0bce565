// The plan's workload as one object (costmodel/plan_workload.h): built once from (model, plan,
// cluster), priced once into the cost table, carried by the Estimate. What it holds per stage is
// checked by hand (layers, parameters, bytes), the pricing against the cost table the engines
// read, and MoE layer patterns (Llama 4's interleaved experts) by hand: FLOPs and parameters.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "costmodel/plan_workload.h"
#include "presets/load.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

ParallelPlan moe_plan(int dp, int tp, int pp, int ep, int microbatches) {
  ParallelPlan p = test::plan_of(dp, tp, pp, microbatches);
  p.ep = ep;
  p.sequence_parallel = tp > 1;
  return p;
}

}  // namespace

// Llama 4 Maverick's released configuration by hand (h 5120, 40 heads and 8 key/value heads of
// 128, dense FFN 16384, 128 experts of 8192 plus one shared, top 1, every other layer MoE from
// layer 1, vocabulary 202,048, untied head): attention 2 x 5120 x 5120 + 2 x 5120 x 1024 =
// 62,914,560; a dense layer + 3 x 5120 x 16384 + 2 x 5120 (RMSNorms) = 314,583,040; an MoE layer
// 62,914,560 + 10,240 + 5120 x 128 (router) + 129 x 3 x 5120 x 8192 = 16,295,536,640; 24 of each
// and 2 x 202,048 x 5120 for the embedding and the head: 400,711,843,840 (Meta: "400B total").
// Active: the MoE layer less 127 routed experts, 315,238,400: 17,184,686,080 ("17B active").
TEST(PlanWorkload, InterleavedMoeModelParametersAndFlopsByHand) {
  const ModelSpec m = load_model("llama4-maverick");
  EXPECT_FALSE(is_moe_layer(m, 0));
  EXPECT_TRUE(is_moe_layer(m, 1));
  EXPECT_FALSE(is_moe_layer(m, 46));
  EXPECT_TRUE(is_moe_layer(m, 47));
  EXPECT_EQ(moe_layers_in(m, 0, 48), 24);
  EXPECT_EQ(moe_layers_in(m, 3, 4), 2);  // layers 3 and 5
  EXPECT_DOUBLE_EQ(flops::model_params(m), 400711843840.0);
  EXPECT_DOUBLE_EQ(flops::active_params(m), 17184686080.0);
  // Forward FLOPs of one 8,192-token sample through the 48 layers: a dense layer 2 x 8192 x
  // 314,572,800 (its products) + 2 x 8192^2 x 40 x 256 (the core) = 6,528,350,289,920; an MoE
  // layer's products add the router and take 2 experts: 2 x 8192 x 315,228,160 + the same core
  // = 6,539,087,708,160; 24 of each.
  EXPECT_DOUBLE_EQ(flops::layers_forward_flops(m, 1), 24 * (6528350289920.0 + 6539087708160.0));
}

// A pattern is checked when read: 0s and 1s, at least one MoE layer, no longer than the layers.
TEST(PlanWorkload, MoeLayerPatternRefusalsNameTheField) {
  ModelSpec m = load_model("llama4-maverick");
  m.moe_layer_pattern = {0, 2};
  EXPECT_NE(error_of([&] { check(m); }).find("moe_layer_pattern"), std::string::npos);
  m.moe_layer_pattern = {0, 0};
  EXPECT_NE(error_of([&] { check(m); }).find("no MoE layer"), std::string::npos);
  ModelSpec dense = load_model("llama3-8b");
  dense.moe_layer_pattern = {1};
  EXPECT_NE(error_of([&] { check(dense); }).find("moe_layer_pattern"), std::string::npos);
}

// Per stage, by hand: Llama 4 Maverick on 4 pipeline ranks of 12 layers, ep 8: stage 0 holds
// layers 0-11 (6 MoE), the embedding; stage 3 the head. Each stage's parameters on one GPU are
// 6 dense layers + 6 MoE layers less 7/8 of their routed experts, plus its ends (the routed
// experts' apart in expert_params as well).
TEST(PlanWorkload, StagesHoldTheirLayersParametersAndBytes) {
  const ModelSpec m = load_model("llama4-maverick");
  const ClusterSpec c = test::cluster_of("h100-ib-1024", 4);
  const ParallelPlan p = moe_plan(8, 1, 4, 8, 8);
  const schedules::Schedule s = plan_schedule(p);
  const PlanWorkload w = build_plan_workload(m, c, p, s);
  ASSERT_EQ(w.stages.size(), 4u);
  const double expert = 3.0 * 5120 * 8192;
  const double moe_local = 62914560.0 + 10240 + 5120.0 * 128 + expert + 16 * expert;  // shared + 128/8 routed
  for (const StageWorkload& st : w.stages) {
    EXPECT_EQ(st.layers, 12);
    EXPECT_EQ(st.moe_layers, 6);
    EXPECT_EQ(st.dense_layers, 6);
    // The head: V h and the final norm's 2h (memory::head_params_per_rank counts a LayerNorm's weight
    // and bias for every kind).
    const double ends = (st.first ? 202048.0 * 5120 : 0) + (st.last ? 202048.0 * 5120 + 2 * 5120 : 0);
    EXPECT_DOUBLE_EQ(st.params, 6 * 314583040.0 + 6 * moe_local + ends) << "stage " << st.stage;
    EXPECT_DOUBLE_EQ(st.expert_params, 6 * 16 * expert);
    // The boundary message: (b, s, h) 16-bit, 1 x 8192 x 5120 x 2.
    EXPECT_DOUBLE_EQ(st.boundary_bytes, 8192.0 * 5120 * 2);
    // One token all-to-all of a sub-batch: 8192 tokens' single copy of 5120 x 2 bytes.
    EXPECT_DOUBLE_EQ(st.moe.bytes.total_bytes, 8192.0 * 5120 * 2);
  }
  EXPECT_TRUE(w.stages[0].first);
  EXPECT_TRUE(w.stages[3].last);
}

// Priced once: the estimate's cost table is the price of its own workload, and the engines' cost
// table (analytic_cost_table) the same, stage by stage, to the bit.
TEST(PlanWorkload, EstimateCarriesTheWorkloadItPriced) {
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const ClusterSpec c = test::cluster_of("h100-ib-1024", 2);
  const ParallelPlan p = moe_plan(8, 1, 2, 8, 8);
  const Estimate e = estimate(m, c, p);
  ASSERT_TRUE(e.workload);
  const CostTable again = price(*e.workload, c, plan_schedule(p), nullptr);
  const CostTable direct = analytic_cost_table(m, c, p, plan_schedule(p));
  ASSERT_EQ(again.stages.size(), e.costs.stages.size());
  for (size_t i = 0; i < again.stages.size(); ++i) {
    EXPECT_EQ(again.stages[i].f_s, e.costs.stages[i].f_s);
    EXPECT_EQ(again.stages[i].b_s, e.costs.stages[i].b_s);
    EXPECT_EQ(direct.stages[i].act_bytes, e.costs.stages[i].act_bytes);
    EXPECT_EQ(direct.stages[i].grad_bytes, e.workload->stages[i].grad_bytes);
  }
  EXPECT_EQ(again.static_bytes, e.costs.static_bytes);
  const nlohmann::json j = to_json(*e.workload);
  EXPECT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["stages"][0]["moe_layers"], 24);
}

// gpt-oss-120b (released config.json): 36 layers of 128 experts (3 x 2880 x 2880 each), router
// 2880 x 128, attention 2880 x 4096 x 2 + 2 x 2880 x 512, norms 2 x 2880; embedding and head 2 x
// 201,088 x 2880: 116,789,045,760 parameters (the model card: 116.8B). Every other layer attends
// a 128-token window of its 4,096: (2 x 4096 x 128 - 128^2) / 4096^2 = 0.0615234375 of the full
// count, the mean over the layers (0.0615234375 + 1) / 2; the core's FLOPs that share of
// 2 s^2 a (d + d_v) = 2 x 4096^2 x 64 x 128.
TEST(PlanWorkload, SlidingWindowLayersByHand) {
  const ModelSpec m = load_model("gpt-oss-120b");
  EXPECT_DOUBLE_EQ(flops::model_params(m), 116789045760.0);
  EXPECT_DOUBLE_EQ(attention_pair_share(m), (0.0615234375 + 1) / 2);
  EXPECT_DOUBLE_EQ(flops::layer_attention_forward_flops(m, 1), 2.0 * 4096 * 4096 * 64 * 128 * 0.530761718750);
  ModelSpec full = m;
  full.sliding_window = 0;
  full.sliding_window_pattern.clear();
  EXPECT_DOUBLE_EQ(attention_pair_share(full), 1.0);
  ModelSpec bad = m;
  bad.sliding_window_pattern = {1, 2};
  EXPECT_NE(error_of([&] { check(bad); }).find("sliding_window_pattern"), std::string::npos);
}

// DeepSeek-V3's multi-token prediction module (mtp_layers 1): "11.5B unique parameters,
// excluding the shared 0.9B Embedding and 0.9B output Head" (deepseek-ai/DeepSeek-V3
// README_WEIGHTS.md): one MoE layer, a (2h -> h) projection and two norms, within 2%. It sits on
// the last stage: one more (MoE) layer there and a second pass of the head.
TEST(PlanWorkload, MultiTokenPredictionOnTheLastStage) {
  ModelSpec m = load_model("deepseek-v3");
  m.mtp_layers = 1;
  EXPECT_NEAR(flops::mtp_params(m), 11.5e9, 0.02 * 11.5e9);
  EXPECT_DOUBLE_EQ(flops::model_params(m), flops::model_params(load_model("deepseek-v3")) + flops::mtp_params(m));
  const ClusterSpec c = test::cluster_of("h100-ib-1024", 32);
  const ParallelPlan p = moe_plan(32, 1, 8, 32, 16);
  const PlanWorkload with = build_plan_workload(m, c, p, plan_schedule(p));
  const PlanWorkload without = build_plan_workload(load_model("deepseek-v3"), c, p, plan_schedule(p));
  const StageWorkload &a = with.stages.back(), &b = without.stages.back();
  EXPECT_EQ(a.layers, b.layers + 1);
  EXPECT_EQ(a.moe_layers, b.moe_layers + 1);
  EXPECT_EQ(a.head_passes, 2);
  EXPECT_EQ(with.stages.front().mtp_layers, 0);
  EXPECT_GT(a.params, b.params);
  const Estimate e = estimate(m, c, p);
  const CostTable& t = e.costs;
  EXPECT_GT(t.stages.back().f_s, estimate(load_model("deepseek-v3"), c, p).costs.stages.back().f_s);
}
