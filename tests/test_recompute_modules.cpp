// Selective recomputation by module (plan.recompute_modules, Megatron-Core's --recompute-modules;
// specs.h RecomputeModules): what each module leaves out of a layer's kept bytes, by hand, what
// its recompute adds to the input gradient's work, and the refusals naming the field.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/stack.h"
#include "costmodel/workload.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

RecomputeModules modules_of(std::initializer_list<std::string> names) {
  ParallelPlan p;
  p.recompute = RecomputePolicy::Selective;
  p.recompute_modules = names;
  return recompute_modules_of(p);
}

}  // namespace

// Mixtral 8x7B (h 4096, 8 experts of 14,336, top 2), t 1, b 1, no sequence parallelism: per sbh at
// 16 bits, moe_act leaves out each copy's activation output, 2 x 2 x 14336 / 4096 = 14; moe leaves
// out everything the block keeps beyond its input: the router's fp32 probabilities 4 x 8 / 4096,
// each copy's input 2 and SwiGLU intermediates 6 x 14336 / 4096 = 21: 2 x 23 + 1/128.
TEST(RecomputeModules, MoeModulesBytesByHand) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const double sbh = 4096.0 * 4096;
  const double selective = memory::layer_activation_selective_bytes(m, 1, 1, false, 1);
  const auto kept = [&](const RecomputeModules& r) {
    return layer_saved_bytes(m, 1, 1, false, r.core_attn, schedules::TpOverlap::Blocking, 1, r).act_bytes;
  };
  EXPECT_DOUBLE_EQ(kept(modules_of({"core_attn"})), selective);
  EXPECT_DOUBLE_EQ(kept(modules_of({"core_attn", "moe_act"})), selective - 14 * sbh);
  EXPECT_DOUBLE_EQ(kept(modules_of({"core_attn", "moe"})), selective - (2 * 23 + 1.0 / 128) * sbh);
  // Without core_attn the core's log-sum-exp stays (4 a s b bytes: 32 heads, 4,096 tokens).
  EXPECT_DOUBLE_EQ(kept(modules_of({"moe_act"})), selective + 4.0 * 32 * 4096 - 14 * sbh);
}

// Llama 3 8B (h 4096, FFN 14,336), t 2 with sequence parallelism: layernorm leaves out the QKV's
// and the MLP's inputs, 2 x 2 sbh / t; mlp the SwiGLU intermediates 6 x 14336 / 4096 / t = 10.5.
TEST(RecomputeModules, DenseModulesBytesByHand) {
  const ModelSpec m = load_model("llama3-8b");
  const double sbh = 8192.0 * 4096;  // the preset's sequence 8,192
  ASSERT_EQ(m.seq_length, 8192);
  EXPECT_DOUBLE_EQ(memory::recomputed_module_bytes(m, 1, 2, true, 0, modules_of({"layernorm"})), 2.0 * sbh);
  EXPECT_DOUBLE_EQ(memory::recomputed_module_bytes(m, 1, 2, true, 0, modules_of({"mlp"})), 10.5 * sbh);
  // An MoE module on a dense layer leaves nothing out.
  EXPECT_DOUBLE_EQ(memory::recomputed_module_bytes(m, 1, 2, true, 0, modules_of({"moe_act"})), 0.0);
}

// The work: mlp repeats the dense MLP's forward products and traffic inside its input gradient;
// layernorm the norms' traffic in each block's.
TEST(RecomputeModules, RecomputeAddsTheModulesForwardToTheInputGradient) {
  const ModelSpec m = load_model("llama3-8b");
  const KernelStack& k = load_stack("megatron-core-te");
  const LayerWork base = layer_work(m, k, 1, 2, true, true);
  const LayerWork mlp = layer_work(m, k, 1, 2, true, true, 1, 1, 0, modules_of({"core_attn", "mlp"}));
  EXPECT_EQ(mlp.mlp_i.gemms.size(), base.mlp_i.gemms.size() + base.mlp_f.gemms.size());
  EXPECT_DOUBLE_EQ(mlp.mlp_i.memory_bytes, base.mlp_i.memory_bytes + base.mlp_f.memory_bytes);
  EXPECT_DOUBLE_EQ(mlp.attn_i.memory_bytes, base.attn_i.memory_bytes);
  const LayerWork ln = layer_work(m, k, 1, 2, true, true, 1, 1, 0, modules_of({"core_attn", "layernorm"}));
  const double norm = 8192.0 * 4096 / 2 * 2 * k.traffic.layer_norm;  // s/t tokens of h, 16-bit
  EXPECT_DOUBLE_EQ(ln.attn_i.memory_bytes, base.attn_i.memory_bytes + norm);
  EXPECT_DOUBLE_EQ(ln.mlp_i.memory_bytes, base.mlp_i.memory_bytes + norm);
}

// The whole MoE block recomputed runs its forward exchanges again in the backward.
TEST(RecomputeModules, MoeModuleRepeatsTheDispatchInTheBackward) {
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const ClusterSpec c = test::cluster_of("h100-ib-1024", 1);
  ParallelPlan p = test::plan_of(8, 1, 1, 2);
  p.ep = 8;
  p.recompute = RecomputePolicy::Selective;
  const Estimate core = estimate(m, c, p);
  p.recompute_modules = {"core_attn", "moe"};
  const Estimate moe = estimate(m, c, p);
  const MoeLayer& a = core.costs.stages[0].moe.layer;
  const MoeLayer& b = moe.costs.stages[0].moe.layer;
  EXPECT_DOUBLE_EQ(b.exposed_b_s, a.exposed_b_s + a.exposed_f_s);
  EXPECT_GT(moe.costs.stages[0].b_s, core.costs.stages[0].b_s);
  EXPECT_LT(moe.costs.stages[0].act_bytes, core.costs.stages[0].act_bytes);
}

TEST(RecomputeModules, RefusalsNameTheField) {
  ParallelPlan p = test::plan_of(8, 1, 1, 2);
  p.recompute = RecomputePolicy::Selective;
  p.recompute_modules = {"core_attn", "attention"};
  const std::string bad_name = error_of([&] { check(p); });
  EXPECT_NE(bad_name.find("recompute_modules"), std::string::npos);
  EXPECT_NE(bad_name.find("'attention'"), std::string::npos);
  EXPECT_NE(bad_name.find("moe_act"), std::string::npos);
  p.recompute = RecomputePolicy::Full;
  p.recompute_modules = {"moe_act"};
  EXPECT_NE(error_of([&] { check(p); }).find("selective"), std::string::npos);
}

// Activation offloading (plan.offload_layers, Megatron-Core's --cpu-offloading-num-layers): the
// offloaded layers' kept bytes leave the stage's activations, one layer's stays in use for the copy
// in flight; the copies run beside the compute, and show only where one takes longer than a
// layer's pass: N x (bytes / host bandwidth - pass / layers).
TEST(RecomputeModules, OffloadedLayersLeaveTheGpuAndShowOnlyWhenSlow) {
  const ModelSpec m = load_model("llama3-8b");
  ClusterSpec c = test::cluster_of("h100-ib-1024", 1);
  c.host_link_bandwidth_Bps = 1e13;  // a host link far faster than the compute: the copies hide
  ParallelPlan p = test::plan_of(8, 1, 1, 2);
  const CostTable base = analytic_cost_table(m, c, p, plan_schedule(p));
  p.offload_layers = 8;
  const CostTable off = analytic_cost_table(m, c, p, plan_schedule(p));
  const StageCost &a = base.stages[0], &b = off.stages[0];
  const double layer = memory::layer_activation_bytes(m, 1, 1, false);  // 32 layers, b 1
  EXPECT_DOUBLE_EQ(b.act_bytes, a.act_bytes - 8 * layer);
  EXPECT_DOUBLE_EQ(b.work_bytes, a.work_bytes + layer);
  EXPECT_DOUBLE_EQ(b.f_s, a.f_s);
  c.host_link_bandwidth_Bps = 1e9;  // a slow host link: the copies show
  p.offload_layers = 0;
  const CostTable slow_base = analytic_cost_table(m, c, p, plan_schedule(p));
  p.offload_layers = 8;
  const CostTable slow = analytic_cost_table(m, c, p, plan_schedule(p));
  const double copy_s = layer / 1e9, f_layer = slow_base.stages[0].f_s / 32;
  EXPECT_NEAR(slow.stages[0].f_s, slow_base.stages[0].f_s + 8 * (copy_s - f_layer), 1e-12);
  p.offload_layers = -1;
  EXPECT_NE(error_of([&] { check(p); }).find("offload_layers"), std::string::npos);
}
