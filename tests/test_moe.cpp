// Mixture of experts and expert parallelism (ModelSpec::num_experts, plan.ep; costmodel/moe.h;
// docs/costmodel.md "Mixture of experts"): parameters in total and active from the presets'
// published figures, FLOPs on active parameters, the all-to-all's bytes and counts by hand,
// memory by hand on one preset, expert gradients on their own groups, refusals naming the
// field. The simulator's agreement: test_routes; the planner choosing ep: test_planner.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "costmodel/host.h"
#include "costmodel/memory.h"
#include "costmodel/moe.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "costmodel/stack.h"
#include "costmodel/topology.h"
#include "costmodel/workload.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

ClusterSpec h100(int nodes) { return test::cluster_of("h100-ib-1024", nodes); }

ParallelPlan plan(int dp, int tp, int pp, int ep, int microbatches) {
  ParallelPlan p = test::plan_of(dp, tp, pp, microbatches);
  p.ep = ep;
  p.sequence_parallel = tp > 1;
  p.recompute = RecomputePolicy::Full;
  return p;
}

}  // namespace

// Each preset's parameters, total and active, against its source's figures (within 2%: the
// sources round to two or three digits, and Qwen3's 3.3B active is 3.35B here with its
// untied output matrix counted):
// Mixtral 8x7B 46.7B / 12.9B (Jiang et al., Sec. 2), Mixtral 8x22B 141B / 39B (Mistral AI),
// DeepSeek-V3 671B / 37B (its report, abstract; without the 14B multi-token-prediction module),
// Qwen3-30B-A3B 30.5B / 3.3B (Qwen3 report, Table 2).
TEST(MixtureOfExperts, PresetParametersMatchTheirSources) {
  struct Row {
    const char* name;
    double total_b, active_b;
  };
  for (const Row& r : {Row{"mixtral-8x7b", 46.7, 12.9}, Row{"mixtral-8x22b", 141, 39}, Row{"deepseek-v3", 671, 37},
                       Row{"qwen3-30b-a3b", 30.5, 3.3}}) {
    SCOPED_TRACE(r.name);
    const ModelSpec m = load_model(r.name);
    EXPECT_NEAR(flops::model_params(m) / 1e9, r.total_b, 0.02 * r.total_b);
    EXPECT_NEAR(flops::active_params(m) / 1e9, r.active_b, 0.02 * r.active_b);
  }
}

// FLOPs count active parameters: an MoE layer's MLP is k + shared experts of 2 or 3 h f_e
// matrices per token plus the router's h E; the model's forward is the dense layers' and the MoE
// layers' (DeepSeek-V3: 3 dense, 58 MoE) plus the head.
TEST(MixtureOfExperts, FlopsCountActiveParameters) {
  const ModelSpec m = load_model("deepseek-v3");
  const double s = m.seq_length, h = m.hidden_size;
  EXPECT_DOUBLE_EQ(flops::moe_block_forward_flops(m, 1), 2 * s * h * 2048 * 3 * (8 + 1) + 2 * s * h * 256);
  // MLA's core: 128 heads with queries and keys of 128 + 64, values of 128.
  EXPECT_DOUBLE_EQ(flops::layer_attention_forward_flops(m, 1), 2 * s * s * 128 * (192 + 128));
  EXPECT_DOUBLE_EQ(flops::layers_forward_flops(m, 1), 3 * flops::layer_forward_flops(m, 1) + 58 * flops::moe_layer_forward_flops(m, 1));
  // Per token, about 6 x active parameters (the matrices) plus attention's quadratic term.
  const double per_token = flops::model_flops_per_iteration(m, 1) / s;
  EXPECT_GT(per_token, 6 * flops::active_params(m) * 0.9);
  EXPECT_LT(per_token, 6 * flops::active_params(m) * 1.6);
}

// The all-to-all's bytes by hand: a rank's tokens x k copies of h 16-bit values; (L - 1)/n of
// them to its node's other ranks and (n - L)/n across nodes; with DeepSeek-V3's node limit each
// token crosses once per remote node it reaches, at most M.
TEST(MixtureOfExperts, AllToAllBytesByHand) {
  const double tokens = 1000, tb = 4096 * 2;
  AllToAllBytes one = all_to_all_bytes(tokens, tb, 2, 8, 1, 0);
  EXPECT_DOUBLE_EQ(one.total_bytes, 2000 * tb);
  EXPECT_DOUBLE_EQ(one.intra_node_bytes, 2000 * tb * 7 / 8);
  EXPECT_DOUBLE_EQ(one.cross_node_bytes, 0);
  AllToAllBytes two = all_to_all_bytes(tokens, tb, 2, 8, 2, 0);
  EXPECT_DOUBLE_EQ(two.intra_node_bytes, 2000 * tb * 7 / 16);
  EXPECT_DOUBLE_EQ(two.cross_node_bytes, 2000 * tb * 8 / 16);
  // 8 experts of a token over 8 nodes reach 8 (1 - (7/8)^8) = 5.25 nodes; the limit keeps 4, of
  // which 7/8 are remote: 3.5 crossings a token instead of 8 x 56/64 = 7.
  AllToAllBytes limited = all_to_all_bytes(tokens, tb, 8, 8, 8, 4);
  EXPECT_DOUBLE_EQ(limited.cross_node_bytes, tokens * tb * 4 * 7 / 8);
  EXPECT_DOUBLE_EQ(all_to_all_bytes(tokens, tb, 8, 8, 8, 0).cross_node_bytes, 8000 * tb * 56 / 64);
  // Time: the in-node and cross-node parts at once, the slower deciding.
  const AllReducePath path = test::path_over_nodes(8, 2, {400e9, 2e-6, "intra-node"}, {40e9, 5e-6, "inter-node"});
  EXPECT_DOUBLE_EQ(all_to_all_s(two, path), std::max(2e-6 + two.intra_node_bytes / 400e9, 5e-6 + two.cross_node_bytes / 40e9));
}

// One MoE layer's communication: dispatch and combine forward, their gradients backward, each
// moving (b s / t x load) tokens' k copies; with tp > 1 the copies' all-gather and reduce-scatter
// over the tp group. Blocking: all of it shows.
TEST(MixtureOfExperts, LayerCommunicationCountsAndExposure) {
  ModelSpec m = load_model("mixtral-8x7b");
  m.moe_load_imbalance = 1.25;
  const ClusterSpec c = h100(2);
  ParallelPlan p = plan(16, 1, 1, 16, 1);
  Topology topo(c, p);
  const AllReducePath path = topo.allreduce_path(kDpCp, 16, 1);
  EXPECT_EQ(path.local, 8);
  EXPECT_EQ(path.nodes, 2);
  const MoeLayer l = moe_layer(m, 1, 1, 16, 1, path, topo.group_link(kTp));
  EXPECT_EQ(l.all_to_alls_f, 2);
  EXPECT_EQ(l.all_to_alls_b, 2);
  EXPECT_DOUBLE_EQ(l.bytes.total_bytes, 4096 * 1.25 * 2 * 4096 * 2);
  // The alltoall dispatcher's probability all-to-all and, forward, its count all-gather besides.
  // By hand: 5120 tokens' 2 fp32 probabilities, 8/16 of them across nodes, each GPU its own NIC
  // (50 GB/s x 0.94, 5 us), slower than the 7/16 over NVLink (450 GB/s x 0.82, 2 us).
  EXPECT_NEAR(l.probs_s, 5e-6 + 4096 * 1.25 * 2 * 4 * 8 / 16 / (50e9 * 0.94), 1e-15);
  EXPECT_LT(l.probs_s, l.all_to_all_s);
  EXPECT_DOUBLE_EQ(l.exposed_f_s, 2 * l.all_to_all_s + l.probs_s + l.counts_s);
  EXPECT_DOUBLE_EQ(l.exposed_b_s, 2 * l.all_to_all_s + l.probs_s);
  EXPECT_DOUBLE_EQ(l.tp_s, 0);
  const Link tp_link{450e9, 3e-6, "intra-node"};
  const MoeLayer t2 = moe_layer(m, 1, 2, 16, 2, path, tp_link);
  EXPECT_DOUBLE_EQ(t2.bytes.total_bytes, l.bytes.total_bytes / 2);  // s / t tokens a tp rank routes
  EXPECT_DOUBLE_EQ(t2.tp_gather_bytes, 4096 * 1.25 * 2 * 4096 * 2);
  EXPECT_DOUBLE_EQ(t2.tp_s, all_gather_s(t2.tp_gather_bytes, 2, tp_link) + reduce_scatter_s(t2.tp_gather_bytes, 2, tp_link));
  EXPECT_EQ(moe_layer(m, 1, 1, 1, 1, path, tp_link).all_to_alls_f, 0);  // ep 1: no all-to-all
  // Whole experts (etp 1) under tp 2: the same s/t tokens routed, no gathers over tp.
  const MoeLayer whole = moe_layer(m, 1, 2, 16, 1, path, tp_link);
  EXPECT_DOUBLE_EQ(whole.bytes.total_bytes, t2.bytes.total_bytes);
  EXPECT_DOUBLE_EQ(whole.tp_s, 0);
}

// Whole experts (etp 1, Megatron-Core --expert-tensor-parallel-size 1) under tp 2: the
// expert-parallel ranks come from tp x dp (ep 16 over dp 8), each expert whole on one rank (its
// parameters not divided by tp), no tp gathers of the copies; the copies' inputs are each rank's
// own (s/t tokens), not gathered whole.
TEST(MixtureOfExperts, WholeExpertsTakeTheirRanksFromTensorParallelToo) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const ClusterSpec c = h100(2);
  ParallelPlan p = plan(8, 2, 1, 8, 4);
  p.etp = 1;
  EXPECT_EQ(expert_ranks(p), 16);
  EXPECT_EQ(expert_data_parallel(p), 2);
  EXPECT_EQ(expert_axis(p), kTpDpCp);
  const Estimate whole = estimate(m, c, p);
  p.etp = 0;
  const Estimate split = estimate(m, c, p);
  EXPECT_DOUBLE_EQ(whole.costs.stages[0].moe.expert_params, 2 * split.costs.stages[0].moe.expert_params);
  EXPECT_DOUBLE_EQ(whole.costs.stages[0].moe.layer.tp_s, 0);
  // By hand (comm.h): all-gather and reduce-scatter over the 2 tp GPUs of the copies, (s k, h) at
  // 16 bits, each 1/2 S / (450 GB/s x 0.82) + 2 us.
  const double copies_bytes = 4096.0 * 2 * 4096 * 2;
  EXPECT_NEAR(split.costs.stages[0].moe.layer.tp_s, 2 * (0.5 * copies_bytes / (450e9 * 0.82) + 2e-6), 1e-15);
  // Per sbh at 16 bits: the copies' inputs 2k whole on each rank (etp = t) or 2k / t (etp 1).
  const double sbh = 4096.0 * 4096;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 1, 2, true, 2) - memory::layer_activation_bytes(m, 1, 2, true, 1),
                   (2 * 2 - 2 * 2 / 2.0) * sbh);
  p.etp = 1;
  p.ep = 16;  // divides tp x dp = 16 but not the 8 experts
  EXPECT_NE(error_of([&] { estimate(m, c, p); }).find("num_experts = 8"), std::string::npos);
  p.ep = 3;
  EXPECT_NE(error_of([&] { estimate(m, c, p); }).find("tp x dp = 16"), std::string::npos);
}

// Memory by hand, Mixtral 8x7B at t = 1, b = 1, no sequence parallelism, fused attention, no
// dropout: per sbh at 16 bits, the norms' and the blocks' inputs 8, each of the k = 2 copies'
// gathered input 2 and the router's fp32 probabilities 4E/h; attention Q 2, K and V 2 x 1/4 each
// and the projection's input 2 (5 in all); per copy the expert's SwiGLU 6 f_e / h = 21 (not its
// output: the probabilities are applied inside the activation, Megatron-Core's weighted SwiGLU);
// plus the core's log-sum-exp 4 a s b. With FP8 the copies' inputs and the down matrices' inputs
// are kept in one byte: each copy 1 + 21 - 3.5, the blocks' inputs 8 - 2, the projection's 1 less.
TEST(MixtureOfExperts, ActivationMemoryByHand) {
  ModelSpec m = load_model("mixtral-8x7b");
  const double sbh = 4096.0 * 4096;
  const double coefficient = 8 + 2 * 2 + 4.0 * 8 / 4096 + 5 + 2 * 21;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 1, 1, false, 1), coefficient * sbh + 4.0 * 32 * 4096);
  m.fp8 = true;
  const double fp8 = 6 + 2 * 1 + 4.0 * 8 / 4096 + 4 + 2 * (21 - 3.5);
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 1, 1, false, 1), fp8 * sbh + 4.0 * 32 * 4096);
  m.fp8 = false;
  // Parameters on one rank at ep 8: the attention and norms, the router, one expert of 3 h f_e.
  const memory::MoeLayerParams p = memory::moe_layer_params_per_rank(m, 1, 8, 1);
  EXPECT_DOUBLE_EQ(p.experts, 3.0 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(p.dense, 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 2 * 4096 + 4096.0 * 8);
}

// The cost table: expert parameters divided by ep, their gradients reduced over dp / ep ranks
// (an all-reduce of their bytes on those groups) beside the rest over dp; the MoE layers' exposed
// communication inside F and B; static memory of the experts sharded by a distributed optimizer
// over the expert-data-parallel group.
TEST(MixtureOfExperts, ExpertGradientsOnTheirOwnGroups) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const ClusterSpec c = h100(8);
  const Estimate e8 = estimate(m, c, plan(64, 1, 1, 8, 4)), e1 = estimate(m, c, plan(64, 1, 1, 1, 4));
  const StageCost& s8 = e8.costs.stages[0];
  const StageCost& s1 = e1.costs.stages[0];
  EXPECT_DOUBLE_EQ(s8.moe.expert_params * 8, s1.moe.expert_params);
  EXPECT_DOUBLE_EQ(s8.expert_grad_bytes, s8.moe.expert_params * grad_bytes_per_param(m));
  EXPECT_EQ(s8.moe.moe_layers, 32);
  // By hand: ep 8 is one node's 8 GPUs (450 GB/s x 0.82, 2 us a hop). Per layer forward: two
  // token all-to-alls of 7/8 of (s k, h) at 16 bits, the probabilities' of 7/8 of (s k) fp32,
  // and the counts' all-gather of E x 8 bytes x ep over the ring (comm.h); 32 layers.
  const double B = 450e9 * 0.82, tokens_s = 2e-6 + 7.0 / 8 * 4096 * 2 * 4096 * 2 / B;
  const double probs_s = 2e-6 + 7.0 / 8 * 4096 * 2 * 4 / B, counts_s = 7 * 2e-6 + 7.0 / 8 * 8 * 8 * 8 / B;
  EXPECT_NEAR(s8.moe.exposed_f_s, 32 * (2 * tokens_s + probs_s + counts_s), 1e-12);
  EXPECT_DOUBLE_EQ(s1.moe.exposed_f_s, 0);  // ep 1: no all-to-all, tp 1: no gathers
  EXPECT_LT(e8.costs.static_bytes[0], e1.costs.static_bytes[0] / 4);
  ParallelPlan z = plan(64, 1, 1, 8, 4);
  z.zero = 1;
  const Estimate ez = estimate(m, c, z);
  // Zero 1: the experts' states over 64 / 8 = 8 copies, the rest over 64.
  const double experts = ez.costs.expert_params[0], rest = ez.costs.params[0] - experts;
  EXPECT_NEAR(ez.costs.static_bytes[0],
              rest * memory::static_bytes_per_param(m, 1, 64) + experts * memory::static_bytes_per_param(m, 1, 8), 1.0);
}

// A plan the experts cannot run names the field: ep dividing the experts and dp; experts under
// tp with sequence parallelism; no ep on a dense model.
TEST(MixtureOfExperts, RefusalsNameTheField) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const ClusterSpec c = h100(8);
  EXPECT_NE(error_of([&] { estimate(m, c, plan(64, 1, 1, 16, 4)); }).find("num_experts = 8"), std::string::npos);
  EXPECT_NE(error_of([&] { estimate(m, c, plan(12, 1, 1, 8, 4)); }).find("plan.ep = 8"), std::string::npos);
  ParallelPlan no_sp = plan(8, 8, 1, 8, 4);
  no_sp.sequence_parallel = false;
  EXPECT_NE(error_of([&] { estimate(m, c, no_sp); }).find("sequence_parallel"), std::string::npos);
  EXPECT_NE(error_of([&] { estimate(load_model("llama3-8b"), c, plan(64, 1, 1, 8, 4)); }).find("has none"), std::string::npos);
  ModelSpec bad = m;
  bad.experts_per_token = 9;
  EXPECT_NE(error_of([&] { check(bad); }).find("experts_per_token = 9"), std::string::npos);
}

// Issue 52: the fields that describe experts mean nothing on a dense model (num_experts 0 or
// absent); a model JSON that gives one, whatever its value, is refused naming it (the capacity
// factor and the load imbalance were read and ignored).
TEST(MixtureOfExperts, ExpertFieldsOnADenseModelAreRefused) {
  const nlohmann::json dense = to_json(load_model("llama3-8b"));
  ASSERT_FALSE(dense.contains("num_experts"));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"moe_capacity_factor", 1.25}, {"moe_capacity_factor", -1}, {"moe_capacity_factor", 0}, {"moe_load_imbalance", 1},
           {"experts_per_token", 0}, {"moe_node_limit", 2}, {"moe_layer_pattern", {1, 0}}}) {
    nlohmann::json j = dense;
    j[field] = value;
    if (field == "moe_node_limit") j["num_experts"] = 0;  // stated dense: the same
    const std::string e = error_of([&] { model_from_json(j); });
    EXPECT_NE(e.find(field + " = " + value.dump() + " is invalid (describes experts, and the model has none"), std::string::npos) << e;
  }
  ModelSpec m = load_model("llama3-8b");  // a spec built in code: the values that differ from a dense model's
  m.moe_capacity_factor = 1.5;
  EXPECT_NE(error_of([&] { check(m); }).find("moe_capacity_factor = 1.5"), std::string::npos);
  m.moe_capacity_factor = 0;
  m.moe_load_imbalance = 1.25;
  EXPECT_NE(error_of([&] { check(m); }).find("moe_load_imbalance = 1.25"), std::string::npos);
  nlohmann::json moe = to_json(load_model("mixtral-8x7b"));  // with experts every field is read
  moe["moe_capacity_factor"] = 1.25;
  EXPECT_DOUBLE_EQ(model_from_json(moe).moe_capacity_factor, 1.25);
}

// The routed experts at their real per-expert shape, as Megatron-Core with Transformer Engine
// runs them (docs/costmodel.md "Mixture of experts", Work): Qwen3-30B-A3B (h 2048, f_e 768, 128
// experts, top-8), one 4,096-token sample, tp 1, ep 8: the rank's experts take 4096 x 8 copies
// over 128 / 8 = 16 local experts, 2,048 rows each; the gated first matrix one product of
// 2 x 768 columns per expert (TEGroupedMLP's linear_fc1), the second 768 -> 2048; each product
// one cuBLAS kernel, 4 experts at once (the stack's grouped_gemm_streams, TE's num_streams).
TEST(MixtureOfExperts, ExpertProductsAtTheirPerExpertShape) {
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const KernelStack& te = load_stack("megatron-core-te");
  EXPECT_EQ(te.grouped_gemm_streams, 4);
  EXPECT_EQ(load_stack("megatron-core-te-flash2").grouped_gemm_streams, 4);
  EXPECT_EQ(load_stack("megatron-lm").grouped_gemm_streams, 0);  // one grouped kernel
  const LayerWork w = layer_work(m, te, 1, 1, false, false, 1, 8, 0);
  ASSERT_EQ(w.moe_f.gemms.size(), 3u);  // router, fc1 (gate and up), fc2
  const Gemm& fc1 = w.moe_f.gemms[1];
  const Gemm& fc2 = w.moe_f.gemms[2];
  EXPECT_DOUBLE_EQ(fc1.m, 2048);
  EXPECT_DOUBLE_EQ(fc1.n, 1536);
  EXPECT_DOUBLE_EQ(fc1.k, 2048);
  EXPECT_DOUBLE_EQ(fc1.batch, 16);
  EXPECT_DOUBLE_EQ(fc1.concurrent, 4);
  EXPECT_DOUBLE_EQ(fc2.m, 2048);
  EXPECT_DOUBLE_EQ(fc2.n, 2048);
  EXPECT_DOUBLE_EQ(fc2.k, 768);
  EXPECT_DOUBLE_EQ(fc2.concurrent, 4);
  // The input and weight gradients: the same products transposed, weight gradient of fc2 768 x 2048
  // over the expert's 2,048 rows.
  EXPECT_DOUBLE_EQ(w.moe_w.gemms[2].m, 768);
  EXPECT_DOUBLE_EQ(w.moe_w.gemms[2].n, 2048);
  EXPECT_DOUBLE_EQ(w.moe_w.gemms[2].k, 2048);
  // The router stays one 16-bit product of the rank's tokens, not streamed.
  EXPECT_DOUBLE_EQ(w.moe_f.gemms[0].concurrent, 0);
  // The FLOPs are those of k = 8 experts per token of 3 h f_e each (forward).
  EXPECT_DOUBLE_EQ(fc1.flops() + fc2.flops(), 2.0 * 4096 * 8 * 3 * 2048 * 768);
}

// Experts 4 at a time: floor(16 / 4) rounds of 4 products, or 2 rounds of 4 and one of 2 for 10.
// By hand for the fc2 weight gradient above (768 x 2048 outputs, H100's 128 x 256 tiles, 132 SMs):
// one product has 6 x 8 = 48 tiles; 4 at once 192 tiles, 2 waves of 132 slots, wave use
// 192 / 264; one grouped kernel of 16: 768 tiles in 6 waves, 768 / 792. The streamed form is
// slower by (768 / 792) / (192 / 264) where compute-bound.
TEST(MixtureOfExperts, StreamedExpertProductsByHand) {
  const ClusterSpec c = h100(1);
  EXPECT_EQ(c.gpu_sms, 132);
  EXPECT_EQ(c.gemm_tile_m, 128);
  EXPECT_EQ(c.gemm_tile_n, 256);
  const double m = 768, n = 2048, k = 2048;
  EXPECT_DOUBLE_EQ(shape::streamed_gemm_s(c, m, n, k, 16, 4), 4 * shape::gemm_s(c, m, n, k, 4));
  EXPECT_DOUBLE_EQ(shape::streamed_gemm_s(c, m, n, k, 10, 4), 2 * shape::gemm_s(c, m, n, k, 4) + shape::gemm_s(c, m, n, k, 2));
  EXPECT_DOUBLE_EQ(shape::streamed_gemm_s(c, m, n, k, 16, 0), shape::gemm_s(c, m, n, k, 16));   // one grouped kernel
  EXPECT_DOUBLE_EQ(shape::streamed_gemm_s(c, m, n, k, 3, 4), shape::gemm_s(c, m, n, k, 3));     // fewer than the streams
  const double ratio = (768.0 / 792.0) / (192.0 / 264.0);
  EXPECT_NEAR(shape::streamed_gemm_s(c, m, n, k, 16, 4) / shape::gemm_s(c, m, n, k, 16), ratio, 1e-12);
}

// Against a published kernel measurement: Transformer Engine's multi-stream grouped GEMM (TE 2.7)
// on an H100, 16 experts of 2,048 rows, n 768, k 2,048 in bf16, 553.9 TFLOP/s (TE PR #2045's
// description, "(16, 2048, 768, 2048)"; the shape of Qwen3-30B-A3B's experts at ep 8 and one
// 4,096-token sample): the streamed model within 5%. The same PR's (8, 4096, 768, 2048), 627.9
// TFLOP/s, the model puts at its largest products' rate, 767 (22% fast: tiles of small n and k
// reach less than the model's wave and tile quantization says; docs/validation.md).
TEST(MixtureOfExperts, StreamedExpertProductsAgainstTransformerEngine) {
  const ClusterSpec c = h100(1);
  const double g = 16, m = 2048, n = 768, k = 2048;
  const double rate = 2 * g * m * n * k / shape::streamed_gemm_s(c, m, n, k, g, 4);
  EXPECT_NEAR(rate / 553.9e12, 1.0, 0.05);
}

// The permutations' bytes by hand (Megatron-Core MoEAlltoAllTokenDispatcher): permutation 1
// before the dispatch and its inverse after the combine, each reading and writing (copies, h);
// with copies from several ranks and several local experts, permutation 2 (sort_chunks_by_idxs)
// after the dispatch and its inverse before the combine, as much again. Qwen3-30B-A3B, one
// 4,096-token sample, ep 8: 32,768 copies of 2,048 bf16 elements.
TEST(MixtureOfExperts, PermutationBytesByHand) {
  const double copies = 4096.0 * 8, h = 2048, e = 2;
  EXPECT_DOUBLE_EQ(moe_permute_bytes(copies, h, e, 16, 8), 8 * copies * h * e);  // 1 GiB
  EXPECT_DOUBLE_EQ(moe_permute_bytes(copies, h, e, 16, 8), 1073741824.0);
  EXPECT_DOUBLE_EQ(moe_permute_bytes(copies, h, e, 16, 1), 4 * copies * h * e);  // one source: no sort
  EXPECT_DOUBLE_EQ(moe_permute_bytes(copies, h, e, 1, 8), 4 * copies * h * e);   // one local expert: no sort
  // In the layer's forward traffic: the router's (T, E) fp32 logits, softmax and top-k, the
  // norm and residual, the SwiGLU over the copies, the permutations; the backward twice that.
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const KernelStack& te = load_stack("megatron-core-te");
  const LayerWork w = layer_work(m, te, 1, 1, false, false, 1, 8, 0);
  const MemoryTraffic& tr = te.traffic;
  const double T = 4096, resid = m.dropout ? tr.bias_dropout_residual : tr.residual;
  const double expected = T * h * e * (tr.layer_norm + resid) + tr.swiglu * e * copies * 768 + T * 128 * 4 * 3 +
                          moe_permute_bytes(copies, h, e, 16, 8);
  EXPECT_DOUBLE_EQ(w.moe_f.memory_bytes, expected);
  EXPECT_DOUBLE_EQ(w.moe_i.memory_bytes, 2 * expected);
}

// gpt-oss's clamped gated MLP (activation_clamp 7.0): Megatron-Core clamps both halves and
// concatenates them eagerly before its fused activation, 8 bytes per element of f_e a forward in
// units of the activation's bytes, twice that backward. One 4,096-token sample at ep 8: 16,384
// routed copies of 2,880 x 2 bytes, 8 x 2 x 16,384 x 2,880 = 754,974,720 bytes more forward.
TEST(MixtureOfExperts, ClampedGatedMlpTrafficByHand) {
  ModelSpec m = load_model("gpt-oss-120b");
  EXPECT_EQ(m.activation_clamp, 7.0);
  const KernelStack& k = load_stack("megatron-core-te");
  const LayerWork clamped = layer_work(m, k, 1, 1, false, false, 1, 8);
  m.activation_clamp = 0;
  const LayerWork plain = layer_work(m, k, 1, 1, false, false, 1, 8);
  EXPECT_DOUBLE_EQ(clamped.moe_f.memory_bytes - plain.moe_f.memory_bytes, 754974720.0);
  EXPECT_DOUBLE_EQ(clamped.moe_i.memory_bytes - plain.moe_i.memory_bytes, 2 * 754974720.0);
  EXPECT_DOUBLE_EQ(activation_traffic(load_model("gpt-oss-120b"), k.traffic), k.traffic.swiglu + 8);
  m.activation_clamp = -1;
  EXPECT_NE(error_of([&] { check(m); }).find("activation_clamp"), std::string::npos);
  ModelSpec gpt = load_model("gpt3-175b");
  gpt.activation_clamp = 7;
  EXPECT_NE(error_of([&] { check(gpt); }).find("kind llama only"), std::string::npos);
}

// gpt-oss's experts' second bias applied outside their products (linear_bias; Megatron-Core
// TEGroupedMLP._apply_bias): per element of the routed output 14 units of 16 bits forward (the bias
// per token in fp32, times the probability, added, cast back) and 16 backward. One 4,096-token
// sample at ep 8: 16,384 routed copies of 2,880, 14 x 2 x 16,384 x 2,880 = 1,321,205,760 bytes
// forward and 16 x 2 x 16,384 x 2,880 = 1,509,949,440 backward.
TEST(MixtureOfExperts, ExpertBiasTrafficByHand) {
  ModelSpec m = load_model("gpt-oss-120b");
  EXPECT_TRUE(m.linear_bias);
  const KernelStack& k = load_stack("megatron-core-te");
  const LayerWork biased = layer_work(m, k, 1, 1, false, false, 1, 8);
  m.linear_bias = false;
  const LayerWork plain = layer_work(m, k, 1, 1, false, false, 1, 8);
  EXPECT_DOUBLE_EQ(biased.moe_f.memory_bytes - plain.moe_f.memory_bytes, 1321205760.0);
  EXPECT_DOUBLE_EQ(biased.moe_i.memory_bytes - plain.moe_i.memory_bytes, 1509949440.0);
  EXPECT_DOUBLE_EQ(biased.attn_f.memory_bytes, plain.attn_f.memory_bytes);  // the dense biases are in the products
}

// YaRN's concentration factor (rope_mscale 0.1 ln 32 + 1 for gpt-oss) runs Megatron-Core's RoPE
// unfused on the queries and keys: per element 12 units forward, 8 backward. gpt-oss at tp 2: 32
// query heads and 4 key heads of 64 per rank, 4,096 tokens: 4,096 x 36 x 64 = 9,437,184 elements,
// 12 x 2 bytes each forward (226,492,416) and 8 x 2 backward (150,994,944). At tp 16 the 8 key
// heads are replicated, one a rank: 4,096 x (4 + 1) x 64 elements.
TEST(MixtureOfExperts, UnfusedRopeTrafficByHand) {
  ModelSpec m = load_model("gpt-oss-120b");
  EXPECT_NEAR(m.rope_mscale, 0.1 * std::log(32.0) + 1, 1e-4);
  const KernelStack& k = load_stack("megatron-core-te");
  const LayerWork yarn = layer_work(m, k, 1, 2, false, false, 1, 8);
  const LayerWork yarn16 = layer_work(m, k, 1, 16, false, false, 1, 8);
  m.rope_mscale = 1;
  const LayerWork fused = layer_work(m, k, 1, 2, false, false, 1, 8), fused16 = layer_work(m, k, 1, 16, false, false, 1, 8);
  EXPECT_DOUBLE_EQ(yarn.attn_f.memory_bytes - fused.attn_f.memory_bytes, 226492416.0);
  EXPECT_DOUBLE_EQ(yarn.attn_i.memory_bytes - fused.attn_i.memory_bytes, 150994944.0);
  EXPECT_DOUBLE_EQ(yarn16.attn_f.memory_bytes - fused16.attn_f.memory_bytes, 4096.0 * 5 * 64 * 12 * 2);
  m.rope_mscale = 0;
  EXPECT_NE(error_of([&] { check(m); }).find("rope_mscale"), std::string::npos);
  ModelSpec mla = load_model("deepseek-v3");
  mla.rope_mscale = 1.2;
  EXPECT_NE(error_of([&] { check(mla); }).find("multi-latent attention"), std::string::npos);
}

// Transformer Engine's fused grouped MLP (stack megatron-core-te-fused-mlp): the routed experts'
// activation and clamp in their products' epilogue (no activation traffic for the routed copies),
// one grouped kernel per matrix (no streams), and no per-expert launches for the host.
TEST(MixtureOfExperts, FusedGroupedMlpStack) {
  const ModelSpec m = load_model("gpt-oss-120b");
  const KernelStack& eager = load_stack("megatron-core-te");
  const KernelStack& fused = load_stack("megatron-core-te-fused-mlp");
  EXPECT_TRUE(fused.fused_grouped_mlp);
  EXPECT_EQ(fused.grouped_gemm_streams, 0);
  const LayerWork a = layer_work(m, eager, 1, 1, false, false, 1, 8), b = layer_work(m, fused, 1, 1, false, false, 1, 8);
  // 16,384 copies of 2,880: (3 + 8) x 2 bytes each forward, and the experts' bias (14), which the
  // fused kernel scales in its epilogue.
  EXPECT_DOUBLE_EQ(a.moe_f.memory_bytes - b.moe_f.memory_bytes, (11.0 + 14) * 2 * 16384 * 2880);
  for (const Gemm& g : b.moe_f.gemms)
    if (g.batch > 1) EXPECT_EQ(g.concurrent, 0.0);
  const HostLayer h = host_layer(fused.host, {}, 16, true);
  EXPECT_NEAR(h.moe_tail_f_s, 16 * fused.host.python_op_s, 1e-12);
}
