// FLOP, parameter, activation and communication formulas against their sources.
#include <gtest/gtest.h>

#include "costmodel/comm.h"
#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {
ModelSpec gpt(int l, int h, int a, int s, int V) {
  ModelSpec m;
  m.name = "t";
  m.num_layers = l;
  m.hidden_size = h;
  m.num_heads = a;
  m.ffn_hidden_size = 4 * h;
  m.seq_length = s;
  m.vocab_size = V;
  return m;
}
}  // namespace

// Megatron-LM SC21 Sec. 5.1: 24bsh^2 + 4bs^2h per layer forward; 2bshV logits.
TEST(Accounting, LayerFlops) {
  ModelSpec m = gpt(2, 1024, 16, 512, 1000);
  double b = 3, s = 512, h = 1024;
  EXPECT_DOUBLE_EQ(flops::layer_forward_flops(m, 3), 24 * b * s * h * h + 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(flops::layer_backward_input_flops(m, 3) + flops::layer_backward_weight_flops(m, 3),
                   2 * flops::layer_forward_flops(m, 3));
  EXPECT_DOUBLE_EQ(flops::head_forward_flops(m, 3), 2 * b * s * h * 1000);
}

// Megatron-LM SC21 eq. (3) without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
TEST(Accounting, ModelFlopsPerIteration) {
  ModelSpec m = gpt(96, 12288, 96, 2048, 51200);
  double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  double expect = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_NEAR(flops::model_flops_per_iteration(m, 1536) / expect, 1.0, 1e-12);
}

// Megatron-LM SC21 Sec. 5.1: 12h^2 + 13h per layer; GPT-3 175B has about 175e9 parameters (Brown et al. 2020).
TEST(Accounting, Parameters) {
  ModelSpec m = gpt(2, 1024, 16, 512, 1000);
  EXPECT_DOUBLE_EQ(flops::layer_params(m), 12.0 * 1024 * 1024 + 13.0 * 1024);
  EXPECT_NEAR(flops::model_params(load_model("gpt3-175b")) / 175e9, 1.0, 0.01);
  // LLaMA-7B: 6.74e9 parameters (Touvron et al. 2023, Table 2).
  EXPECT_NEAR(flops::model_params(load_model("llama-7b")) / 6.74e9, 1.0, 0.005);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m), 16.0);  // mixed-precision Adam
}

// Korthikanti et al. MLSys 2023 eq. 1-2: sbh(34 + 5as/h), with tp t: sbh(10 + 24/t + 5as/(ht)).
TEST(Accounting, ActivationsKorthikanti) {
  ModelSpec m = gpt(1, 2048, 16, 1024, 1000);
  double s = 1024, b = 2, h = 2048, a = 16;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 2, 1), s * b * h * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 2, 4), s * b * h * (10 + 24.0 / 4 + 5 * a * s / (h * 4)));
  EXPECT_DOUBLE_EQ(memory::layer_activation_selective_bytes(m, 2, 4), s * b * h * (10 + 24.0 / 4));
  EXPECT_DOUBLE_EQ(memory::layer_checkpoint_bytes(m, 2), 2 * s * b * h);
  // With sequence parallelism: sbh/t (34 + 5as/h) (Korthikanti eq. 4); checkpoints and
  // pipeline messages split t ways too.
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(m, 2, 4, true), s * b * h / 4 * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(memory::layer_checkpoint_bytes(m, 2, 4, true), 2 * s * b * h / 4);
  EXPECT_DOUBLE_EQ(memory::boundary_message_bytes(m, 2, 4, true), memory::boundary_message_bytes(m, 2) / 4);
  // Without dropout: no masks (sbh twice, as^2b in the core) and no dropout output (2as^2b).
  ModelSpec nodrop = m;
  nodrop.dropout = false;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(nodrop, 2, 1), s * b * h * (32 + 2 * a * s / h));
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(nodrop, 2, 4, true), s * b * h / 4 * (32 + 2 * a * s / h));
  EXPECT_DOUBLE_EQ(memory::embedding_activation_bytes(nodrop, 2), 0);
  EXPECT_DOUBLE_EQ(memory::embedding_activation_bytes(m, 2), s * b * h);
  EXPECT_FALSE(model_from_json(to_json(nodrop)).dropout);
  EXPECT_FALSE(to_json(m).contains("dropout"));
  ModelSpec f32 = m;
  f32.bytes_per_activation = 4;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(f32, 2, 1), 2 * memory::layer_activation_bytes(m, 2, 1));
}

// nccl-tests PERFORMANCE.md: ring all-reduce 2(n-1)/n S/B + 2(n-1) alpha.
TEST(Accounting, Collectives) {
  Link l{10e9, 5e-6, "intra-node"};
  EXPECT_DOUBLE_EQ(p2p_s(1e9, l), 5e-6 + 0.1);
  EXPECT_DOUBLE_EQ(ring_allreduce_s(1e9, 4, l), 1.5 * 0.1 + 6 * 5e-6);
  EXPECT_DOUBLE_EQ(reduce_scatter_s(1e9, 4, l), 0.75 * 0.1 + 3 * 5e-6);
  EXPECT_DOUBLE_EQ(all_gather_s(1e9, 4, l), reduce_scatter_s(1e9, 4, l));
  EXPECT_DOUBLE_EQ(ring_allreduce_s(1e9, 1, l), 0);
  EXPECT_DOUBLE_EQ(p2p_s(1e9, {0, 0, "self"}), 0);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth_Bps(1e9, 4, 0.1), 1e10 * 1.5);
}

// The optimizer's states as the recipes narrow them. NeMo's distributed Adam with its state in
// bf16 beside bf16 weights keeps no master and bf16 moments (Nemotron-4 340B's recipe): 2 + 2 +
// (0 + 2 + 2)/dp with bf16 gradients, 2 + 2 + 4/2 = 6 at dp 2 where the default is 2 + 2 + 12/2
// = 10. Its fp32 state beside bf16 weights keeps the master's 16 low bits: 2 + 4 + (2 + 8)/dp.
// DeepSeek-V3's bf16 moments beside an fp32 master: (4 + 4)/dp. The step reads and writes them.
TEST(Accounting, OptimizerStatesAsTheRecipesNarrowThem) {
  ModelSpec m = load_model("gpt-1.4b");  // 16-bit weights and gradients
  EXPECT_EQ(master_bytes_per_param(m), 4);
  EXPECT_EQ(moment_bytes_per_param(m), 8);
  m.bytes_per_master = 0;
  m.bytes_per_moment = 2;
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 1, 2), 2 + 2 + 4.0 / 2);
  EXPECT_DOUBLE_EQ(memory::optimizer_traffic_bytes_per_param(m), (2 + 2 + 0 + 4) + (2 + 0 + 4));
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(m, 3, 4), (2 + 0 + 2 + 4) / 4.0);  // the weights' shard kept
  ModelSpec r = load_model("gpt-1.4b");
  r.bytes_per_grad = 4;
  r.bytes_per_master = 2;
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(r, 1, 4), 2 + 4 + (2 + 8.0) / 4);
  ModelSpec d = load_model("gpt-1.4b");
  d.bytes_per_moment = 2;
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(d, 1, 8), 2 + 2 + (4 + 4.0) / 8);
  EXPECT_EQ(model_from_json(to_json(m)).bytes_per_master, 0);
  EXPECT_EQ(model_from_json(to_json(m)).bytes_per_moment, 2);
  EXPECT_FALSE(to_json(load_model("gpt-1.4b")).contains("bytes_per_master"));
  for (const auto& [field, value] : {std::pair{"bytes_per_master", 3}, {"bytes_per_moment", 8}}) {
    nlohmann::json bad = to_json(m);
    bad[field] = value;
    EXPECT_NE(stagecraft::test::error_of([&] { model_from_json(bad); }).find(field), std::string::npos) << field;
  }
}

// bf16 as Megatron-LM trains it keeps and all-reduces gradients in fp32 (megatron/training/
// arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32"):
// 2 + 4 + 4 + 8 = 18 bytes per parameter, the distributed optimizer sharding the fp32 parts,
// and twice the gradient bytes on the data-parallel links.
TEST(Accounting, Bf16GradientsInFp32) {
  ModelSpec fp16 = load_model("gpt-1.4b"), bf16 = fp16;
  bf16.bytes_per_grad = 4;
  EXPECT_EQ(grad_bytes_per_param(fp16), 2);
  EXPECT_EQ(grad_bytes_per_param(bf16), 4);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(fp16), 16);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(bf16), 18);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(bf16, 1, 4), 2 + 4 + 12.0 / 4);
  EXPECT_DOUBLE_EQ(memory::static_bytes_per_param(bf16, 2, 4), 2 + 16.0 / 4);
  EXPECT_DOUBLE_EQ(memory::optimizer_traffic_bytes_per_param(bf16), memory::optimizer_traffic_bytes_per_param(fp16) + 2);
  EXPECT_EQ(model_from_json(to_json(bf16)).bytes_per_grad, 4);
  EXPECT_FALSE(to_json(fp16).contains("bytes_per_grad"));
  nlohmann::json bad = to_json(bf16);
  bad["bytes_per_grad"] = 3;
  EXPECT_THROW(model_from_json(bad), stagecraft::InputError);

  const ClusterSpec c = load_cluster("merak-3090-64");
  ParallelPlan p;
  p.dp = 8;
  p.pp = 2;
  p.num_microbatches = 4;
  const Estimate e16 = estimate(fp16, c, p), e32 = estimate(bf16, c, p);
  for (size_t r = 0; r < e16.costs.static_bytes.size(); ++r)
    EXPECT_DOUBLE_EQ(e32.costs.static_bytes[r], e16.costs.static_bytes[r] * 18.0 / 16.0);
  ASSERT_FALSE(e16.eval.dp_comm_s.empty());
  EXPECT_GT(e32.eval.dp_comm_s[0], 1.8 * e16.eval.dp_comm_s[0]);  // bandwidth-bound: about twice
}
