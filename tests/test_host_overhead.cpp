// The host's part of a layer (costmodel/host.h): the kernels a layer's blocks issue at the
// megatron-core-te stack's per-kernel costs (21 us from Python, 11 us from C++), by hand for one
// Qwen3-30B-A3B layer at ep 8 (16 local experts, MXFP8); CUDA graph scopes replacing a block's
// kernels with one launch; the dispatch's synchronisation splitting the forward; what an estimate
// makes of it; and the refusals of bad scopes and host tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/host.h"
#include "presets/load.h"
#include "runtime/support/rules.h"
#include "costmodel/stack.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

constexpr double kPy = 21e-6, kCpp = 11e-6;  // the stack's host.python_op_s and host.launch_s

CudaGraphScopes scopes(const std::vector<std::string>& names) {
  ParallelPlan p;
  p.cuda_graph_scope = names;
  return cuda_graph_scopes_of(p);
}

// Qwen3-30B-A3B in MXFP8 on one 8-GPU node, dp 8, ep 8, microbatch size 1.
Estimate qwen_estimate(const std::string& cluster, const std::vector<std::string>& graphs) {
  ModelSpec m = load_model("qwen3-30b-a3b");
  m.fp8 = true;
  m.fp8_recipe = Fp8Recipe::Mxfp8;
  ParallelPlan p = test::plan_of(8, 1, 1, 8);
  p.ep = 8;
  p.stack = "megatron-core-te";
  p.cuda_graph_scope = graphs;
  return estimate(m, test::cluster_of(cluster, 1), p);
}

double host_wait_s(const Estimate& e) { return compute_by_kind(e).front().passes.host_s; }

}  // namespace

TEST(HostOverhead, StackCostsAreTheGuidesLowerEnds) {
  const HostCosts& h = load_stack("megatron-core-te").host;
  EXPECT_DOUBLE_EQ(h.python_op_s, kPy);  // 10 + 5 + 5 + 1 us
  EXPECT_DOUBLE_EQ(h.launch_s, kCpp);    // 5 + 5 + 1 us
  // The flash2 stack names megatron-core-te's host costs rather than copying them.
  const HostCosts& f = load_stack("megatron-core-te-flash2").host;
  EXPECT_DOUBLE_EQ(f.python_op_s, h.python_op_s);
  EXPECT_DOUBLE_EQ(f.experts_b.per_expert, h.experts_b.per_expert);
  EXPECT_EQ(load_stack("megatron-lm").host.python_op_s, 0.0);  // no host table: none priced
}

// 16 local experts, MXFP8, router and preprocessing graphed. Forward up to the synchronisation:
// the attention's 12 kernels and two graph launches; after it the experts' 16 kernels from
// Python and 16 x (2 products + 2 quantisations) from C++. Backward: 24 attention kernels, two
// graph launches, 15 from Python and 16 x (4 + 2) from C++.
TEST(HostOverhead, QwenLayerByHand) {
  const HostCosts& h = load_stack("megatron-core-te").host;
  const HostLayer l = host_layer(h, scopes({"moe_router", "moe_preprocess"}), 16, true);
  EXPECT_TRUE(l.synchronises);
  EXPECT_NEAR(l.moe_head_f_s, (12 + 2) * kPy, 1e-12);
  EXPECT_NEAR(l.moe_tail_f_s, 16 * kPy + 16 * 4 * kCpp, 1e-12);
  EXPECT_NEAR(l.moe_b_s, (24 + 2 + 15) * kPy + 16 * 6 * kCpp, 1e-12);
  EXPECT_NEAR(l.dense_f_s, (12 + 6) * kPy, 1e-12);
  EXPECT_NEAR(l.dense_b_s, (24 + 12) * kPy, 1e-12);
  // Eager, bf16: the router's 30 and preprocessing's 13 kernels back, 2 products an expert.
  const HostLayer e = host_layer(h, {}, 16, false);
  EXPECT_NEAR(e.moe_head_f_s, (12 + 30 + 13) * kPy, 1e-12);
  EXPECT_NEAR(e.moe_tail_f_s, 16 * kPy + 16 * 2 * kCpp, 1e-12);
}

TEST(HostOverhead, GraphsReplaceKernelsWithOneLaunch) {
  const HostCosts& h = load_stack("megatron-core-te").host;
  const HostLayer full = host_layer(h, scopes({"full_iteration"}), 16, true);
  EXPECT_EQ(full.dense_f_s + full.moe_head_f_s + full.moe_tail_f_s + full.moe_b_s, 0.0);
  EXPECT_FALSE(full.synchronises);
  // A graphed MoE block (drop-and-pad) is one launch each way and does not synchronise.
  const HostLayer moe = host_layer(h, scopes({"attn", "moe"}), 16, true);
  EXPECT_FALSE(moe.synchronises);
  EXPECT_NEAR(moe.moe_head_f_s, 2 * kPy, 1e-12);
  EXPECT_NEAR(moe.moe_b_s, 2 * kPy, 1e-12);
}

// The synchronisation before the dispatch keeps the host from banking the attention's slack:
// 294 us of head against 500 us of attention and 1,040 us of tail against 400 us of experts
// wait 640 us; without it the layer would wait 1,334 - 900 = 434 us.
TEST(HostOverhead, SynchronisationSplitsTheForward) {
  HostLayer h;
  h.moe_head_f_s = 294e-6, h.moe_tail_f_s = 1040e-6, h.synchronises = true;
  GpuLayer g;
  g.attn_f_s = 500e-6, g.moe_f_s = 400e-6;
  EXPECT_NEAR(host_wait(h, g).moe_f_s, 640e-6, 1e-12);
  h.synchronises = false;
  EXPECT_NEAR(host_wait(h, g).moe_f_s, 434e-6, 1e-12);
  h.dense_b_s = 1e-3;
  g.attn_b_s = 2e-3;
  EXPECT_EQ(host_wait(h, g).dense_b_s, 0.0);  // the GPU is the slower: nothing waits
}

// At microbatch size 1 on B200s the experts' launches outlast their products: the estimate waits
// for the host, more with fewer graphs, not at all with full-iteration graphs.
TEST(HostOverhead, EstimateWaitsLessWithMoreGraphs) {
  const Estimate eager = qwen_estimate("b200-ib-1024", {});
  const Estimate partial = qwen_estimate("b200-ib-1024", {"attn", "moe_router", "moe_preprocess"});
  const Estimate full = qwen_estimate("b200-ib-1024", {"full_iteration"});
  EXPECT_GT(host_wait_s(eager), host_wait_s(partial));
  EXPECT_EQ(host_wait_s(full), 0.0);
  // By hand: the host's seconds of a layer with attention, router and preprocessing graphed (one
  // launch each), against the GPU's, the full-iteration estimate's pieces (no waits in them):
  // forward up to the synchronisation 3 launches, after it 16 kernels from Python and 16 x (2
  // products + 2 quantisations) from C++; backward 3 launches, 15 from Python, 16 x 6 from C++;
  // 8 microbatches x 48 layers.
  const InnerCosts& g = full.costs.stages.front().inner;
  const double head = 3 * kPy, tail = 16 * kPy + 16 * 4 * kCpp, back = 18 * kPy + 16 * 6 * kCpp;
  const double layer = std::max(0.0, head - g.attn_f_s) + std::max(0.0, tail - g.mlp_f_s) +
                       std::max(0.0, back - (g.attn_i_s + g.attn_w_s + g.mlp_i_s + g.mlp_w_s));
  EXPECT_GT(layer, 0.0);
  EXPECT_NEAR(host_wait_s(partial), 8 * 48 * layer, 1e-9 * 8 * 48 * layer);
  EXPECT_GT(eager.eval.iteration_time_s, partial.eval.iteration_time_s);
  EXPECT_GT(partial.eval.iteration_time_s, full.eval.iteration_time_s);
}

// A dense 70B layer at tp 8 runs far longer on the GPU than its kernels take to issue.
TEST(HostOverhead, LargeDenseLayersNeverWait) {
  ParallelPlan p = test::plan_of(1, 8, 4, 16);
  p.stack = "megatron-core-te";
  p.sequence_parallel = true;
  const Estimate e = estimate(load_model("llama3-70b"), test::cluster_of("h100-ib-1024", 4), p);
  EXPECT_EQ(host_wait_s(e), 0.0);
}

TEST(HostOverhead, BadScopesAreRefusedNamingThem) {
  ParallelPlan p;
  p.cuda_graph_scope = {"attention"};
  EXPECT_NE(error_of([&] { check(p); }).find("cuda_graph_scope"), std::string::npos);
  EXPECT_NE(error_of([&] { check(p); }).find("'attention'"), std::string::npos);
  p.cuda_graph_scope = {"full_iteration", "attn"};
  EXPECT_NE(error_of([&] { check(p); }).find("full_iteration"), std::string::npos);
  p.cuda_graph_scope = {"moe_preprocess"};
  EXPECT_NE(error_of([&] { check(p); }).find("moe_router"), std::string::npos);
  p.cuda_graph_scope = {"attn", "moe_router", "moe_preprocess"};
  EXPECT_NO_THROW(check(p));
  EXPECT_EQ(plan_from_json(to_json(p)).cuda_graph_scope, p.cuda_graph_scope);
}

TEST(HostOverhead, BadHostTablesAreRefusedNamingTheField) {
  const nlohmann::json bad_count = {{"name", "x"}, {"host", {{"experts_f", {{"per_expert", -1}}}}}};
  EXPECT_NE(error_of([&] { stack_from_json(bad_count); }).find("host.experts_f.per_expert"), std::string::npos);
  const nlohmann::json bad_cost = {{"name", "x"}, {"host", {{"python_op_s", -1e-6}}}};
  EXPECT_NE(error_of([&] { stack_from_json(bad_cost); }).find("host.python_op_s"), std::string::npos);
  const nlohmann::json unknown = {{"name", "x"}, {"host", {{"pyton_op_s", 1e-6}}}};
  EXPECT_NE(error_of([&] { stack_from_json(unknown); }).find("pyton_op_s"), std::string::npos);
}

// The runtime captures no CUDA graphs: a plan that names some is priced but not trained, with
// the same words in estimate's note and train's refusal (runtime/support/rules.h).
TEST(HostOverhead, TheRuntimeRefusesCudaGraphs) {
  ParallelPlan p = test::plan_of(1, 1, 2, 4);
  p.cuda_graph_scope = {"attn"};
  const ModelSpec m = load_model("tiny");
  EXPECT_FALSE(runtime::runtime_runs(m, p));
  EXPECT_NE(runtime::runtime_refusal(m, p, plan_schedule(p)).find("cuda_graph_scope"), std::string::npos);
  p.cuda_graph_scope.clear();
  EXPECT_TRUE(runtime::runtime_runs(m, p));
}
