// FP8 recipes priced apart (ModelSpec::fp8_recipe; docs/costmodel.md "FP8 recipes") and FP8
// under zero 3 (the FP8 parameter all-gather; costmodel/fsdp.h), each against hand-derived figures.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "costmodel/fsdp.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

ModelSpec gpt(Fp8Recipe r) {
  ModelSpec m = stagecraft::test::model_with_fp8("gpt3-7.5b", true);  // h 4096, a 32, f 16384, s 2048: GeLU MLP, multi-head
  m.fp8_recipe = r;
  m.attention_kernel = AttentionKernel::Fused;
  return m;
}

// One layer, microbatch 1, tp 1: the forward's and the input gradient's seconds.
std::pair<double, double> layer_fi(Fp8Recipe r, const ClusterSpec& c) {
  const shape::LayerTimes l = shape::layer_times(gpt(r), c, 1, 1, false);
  return {l.attn_f_s + l.mlp_f_s, l.attn_i_s + l.mlp_i_s};
}

}  // namespace

// The casts of one GPT layer at tp 1, T = b s = 2048 tokens (workload.cpp): forward, the inputs of
// QKV and of the projection (T h each) and of up and down (T h + T f = 5 T h): 7 T h elements;
// input gradient, the output gradients of QKV (3 T h), the projection (T h), up (T f = 4 T h) and
// down (T h): 9 T h. Per element: delayed 4 bytes, current 6 (an amax pass reads the 16-bit tensor
// first), blockwise 4 + 2 x 4/128 = 4.0625 (fp32 scales per 128 for both copies), MXFP8 4 + 2 x 1/32
// = 4.0625 (a scale byte per 32). The products run at the same rate (blockwise: ASSUMED equal to
// tensor-wise FP8; MXFP8 at the MXFP8 peak, the FP8 peak on Blackwell), so the differences are the
// extra bytes over memory_efficiency x bandwidth.
TEST(Fp8Recipes, OneH100LayerByHand) {
  const ClusterSpec c = load_cluster("h100-ib-1024");
  const double Th = 2048.0 * 4096, bw = 3.35e12 * 0.9;
  const auto d = layer_fi(Fp8Recipe::Delayed, c), cur = layer_fi(Fp8Recipe::Current, c), blk = layer_fi(Fp8Recipe::Blockwise, c);
  EXPECT_NEAR(cur.first - d.first, 2 * 7 * Th / bw, 1e-12);        // 38.95 us
  EXPECT_NEAR(cur.second - d.second, 2 * 9 * Th / bw, 1e-12);      // 50.08 us
  EXPECT_NEAR(blk.first - d.first, 0.0625 * 7 * Th / bw, 1e-12);   // 1.22 us
  EXPECT_NEAR(blk.second - d.second, 0.0625 * 9 * Th / bw, 1e-12);
  // MXFP8 needs Blackwell's block-scaled tensor cores: refused on an H100, naming the field.
  const std::string msg = error_of([&] { estimate(gpt(Fp8Recipe::Mxfp8), c, stagecraft::test::plan_of(1, 8, 1, 1)); });
  EXPECT_NE(msg.find("gpu_mxfp8_peak_flops_per_s = 0"), std::string::npos) << msg;
}

// On a B200 (compute capability 10.0) FP8 products read any layout, so delayed and current
// scaling write no transpose: 3 and 5 bytes per element cast, where blockwise and MXFP8 still
// write both copies (4.0625): blockwise and MXFP8 are 1.0625 bytes above delayed, current 2.
TEST(Fp8Recipes, OneB200LayerByHand) {
  const ClusterSpec c = load_cluster("b200-ib-1024");
  const double Th = 2048.0 * 4096, bw = 7.7e12 * 0.9;
  const auto d = layer_fi(Fp8Recipe::Delayed, c), cur = layer_fi(Fp8Recipe::Current, c);
  const auto blk = layer_fi(Fp8Recipe::Blockwise, c), mx = layer_fi(Fp8Recipe::Mxfp8, c);
  EXPECT_NEAR(cur.first - d.first, 2 * 7 * Th / bw, 1e-12);
  EXPECT_NEAR(blk.first - d.first, 1.0625 * 7 * Th / bw, 1e-12);
  EXPECT_NEAR(mx.first - d.first, 1.0625 * 7 * Th / bw, 1e-12);  // B200's MXFP8 peak = its FP8 peak
  EXPECT_NEAR(mx.second - d.second, 1.0625 * 9 * Th / bw, 1e-12);
}

// The weights' FP8 copies per step on an H100 (compute capability 9.0: FP8 products take the TN
// layout only): delayed 2 bytes kept (the weight and its transpose) and 4 of traffic, current 6
// of traffic, blockwise 2 + 8/16384 (one 128x128 fp32 scale per copy). On a B200 (10.0, any
// layout, Transformer Engine's is_non_tn_fp8_gemm_supported) per-tensor scaling keeps one copy:
// 1 byte, 3 and 5 of traffic; MXFP8 still 2 + 2/32 (row- and column-wise scales). On a whole
// iteration of a B200 the four recipes give four different times.
TEST(Fp8Recipes, WeightCopiesAndFourIterationTimes) {
  const ClusterSpec h100 = load_cluster("h100-ib-1024"), c = load_cluster("b200-ib-1024");
  ASSERT_FALSE(h100.fp8_gemm_any_layout());
  ASSERT_TRUE(c.fp8_gemm_any_layout());
  EXPECT_EQ(fp8_weight_copy_bytes(gpt(Fp8Recipe::Delayed), h100), 2);
  EXPECT_EQ(fp8_weight_cast_bytes(gpt(Fp8Recipe::Delayed), h100), 4);
  EXPECT_EQ(fp8_weight_cast_bytes(gpt(Fp8Recipe::Current), h100), 6);
  EXPECT_EQ(fp8_weight_copy_bytes(gpt(Fp8Recipe::Blockwise), h100), 2 + 8.0 / 16384);
  EXPECT_EQ(fp8_weight_copy_bytes(gpt(Fp8Recipe::Delayed), c), 1);
  EXPECT_EQ(fp8_weight_copy_bytes(gpt(Fp8Recipe::Current), c), 1);
  EXPECT_EQ(fp8_weight_cast_bytes(gpt(Fp8Recipe::Delayed), c), 3);
  EXPECT_EQ(fp8_weight_cast_bytes(gpt(Fp8Recipe::Current), c), 5);
  EXPECT_EQ(fp8_weight_copy_bytes(gpt(Fp8Recipe::Mxfp8), c), 2.0625);
  std::vector<double> t;
  for (Fp8Recipe r : {Fp8Recipe::Delayed, Fp8Recipe::Current, Fp8Recipe::Blockwise, Fp8Recipe::Mxfp8})
    t.push_back(estimate(gpt(r), c, stagecraft::test::plan_of(1, 8, 1, 4)).eval.iteration_time_s);
  EXPECT_LT(t[0], t[2]);  // delayed < blockwise < MXFP8 (its weight scales) < current
  EXPECT_LT(t[2], t[3]);
  EXPECT_LT(t[3], t[1]);
}

TEST(Fp8Recipes, RecipeNeedsFp8AndAKnownName) {
  ModelSpec m = gpt(Fp8Recipe::Current);
  m.fp8 = false;
  EXPECT_NE(error_of([&] { check(m); }).find("fp8_recipe = current with fp8 = false"), std::string::npos);
  nlohmann::json j = to_json(gpt(Fp8Recipe::Blockwise));
  EXPECT_EQ(j.at("fp8_recipe"), "blockwise");
  EXPECT_EQ(model_from_json(j).fp8_recipe, Fp8Recipe::Blockwise);
  j["fp8_recipe"] = "e4m3";
  EXPECT_NE(error_of([&] { model_from_json(j); }).find("allowed: delayed, current, blockwise, mxfp8"), std::string::npos);
}

// FP8 with zero 3 is priced: each layer's linear weights gather 1 byte each (Megatron-Core
// --fp8-param-gather, torchao's float8 all-gather), the rest 16-bit; a gathered unit holds its
// FP8 copies: on Hopper the weights and their FP8 transposes (2 bytes each), on Blackwell the
// weights alone (1).
TEST(Fp8Recipes, Zero3GathersFp8Weights) {
  ModelSpec m = gpt(Fp8Recipe::Delayed);
  const std::vector<FsdpUnitWork> units = {{1000, 1, 2, 0, 0, 800}};
  auto none = [](double) { return 0.0; };
  const FsdpStage f = fsdp_stage(units, m, true, none, none);
  EXPECT_EQ(f.gather_bytes, 200 * 2 + 800 * 1);                 // 1,200 of 2,000 bytes in 16 bits
  EXPECT_EQ(f.gathered_bytes, 2 * ((1200 + 800) + 1000 * 2.0));  // bf16 gradients (gpt3-7.5b: 2 bytes)
  EXPECT_EQ(fsdp_stage(units, m, true, none, none, 1).gathered_bytes, 2 * (1200 + 1000 * 2.0));
  ParallelPlan p = stagecraft::test::plan_of(8, 1, 1, 4);
  p.zero = 3;
  const Estimate e = estimate(m, load_cluster("h100-ib-1024"), p);
  ModelSpec bf16 = m;
  bf16.fp8 = false;
  const Estimate b = estimate(bf16, load_cluster("h100-ib-1024"), p);
  EXPECT_LT(e.costs.stages[0].fsdp.gather_bytes, 0.55 * b.costs.stages[0].fsdp.gather_bytes);  // about half
  EXPECT_GT(e.costs.stages[0].fsdp.gather_bytes, 0.5 * b.costs.stages[0].fsdp.gather_bytes);
}

// FP8 compute weights only (plan.fp8_param_gather; Megatron-Core --fp8-param-gather, which the
// FP8 presets of Megatron-Bridge and NeMo 2.0 set): with zero 1, each rank keeps its FP8 copies
// in place of the 16-bit weights, and the distributed optimizer's all-gather moves one byte per
// FP8 weight (per-tensor scaling) instead of two. Static memory falls by exactly the 16-bit copy,
// 2 bytes per FP8 weight, on a B200 (one FP8 copy kept) and an H100 (data and transpose) alike.
TEST(Fp8Recipes, Fp8ParamGatherKeepsOnlyFp8Weights) {
  for (const char* cluster : {"b200-ib-1024", "h100-ib-1024"}) {
    const ClusterSpec c = load_cluster(cluster);
    ParallelPlan p = stagecraft::test::plan_of(8, 1, 1, 4);
    p.zero = 1;
    const Estimate plain = estimate(gpt(Fp8Recipe::Current), c, p);
    p.fp8_param_gather = true;
    const Estimate kept = estimate(gpt(Fp8Recipe::Current), c, p);
    const CostTable &a = plain.costs, &b = kept.costs;
    const double fp8 = a.fp8_params[0], params = a.params[0];
    ASSERT_GT(fp8, 0.9 * params) << cluster;  // the layers' matrices: nearly all of a 7.5B model's weights
    EXPECT_NEAR(a.static_bytes[0] - b.static_bytes[0], 2 * fp8, 1e-6 * params) << cluster;
    EXPECT_NEAR(a.param_gather_bytes[0], 2 * params, 1e-6 * params) << cluster;
    EXPECT_NEAR(b.param_gather_bytes[0], 2 * (params - fp8) + fp8, 1e-6 * params) << cluster;
  }
}

TEST(Fp8Recipes, Fp8ParamGatherNeedsFp8AndZero1Or2) {
  ParallelPlan p = stagecraft::test::plan_of(8, 1, 1, 4);
  p.fp8_param_gather = true;
  EXPECT_NE(error_of([&] { check(p); }).find("fp8_param_gather"), std::string::npos);  // zero 0
  p.zero = 3;
  EXPECT_NE(error_of([&] { check(p); }).find("zero 3 gathers FP8 weights"), std::string::npos);
  p.zero = 1;
  ModelSpec bf16 = gpt(Fp8Recipe::Delayed);
  bf16.fp8 = false;
  const std::string msg = error_of([&] { estimate(bf16, load_cluster("h100-ib-1024"), p); });
  EXPECT_NE(msg.find("fp8_param_gather = true"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs an FP8 model"), std::string::npos) << msg;
}
