// Grouped-query attention (num_kv_heads) and the open-model presets that use it: parameters
// against the released checkpoints, FLOPs, kept activations and GEMM shapes against the
// formulas, the tensor-parallel rule, JSON in and out, the planner's tp choices.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "costmodel/flops.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "planner/space.h"
#include "schedules/error.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {

ModelSpec with_kv(ModelSpec m, int kv) {
  m.num_kv_heads = kv;
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const stagecraft::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Parameter counts of the released checkpoints (the sum of every tensor in Meta's Hugging Face
// safetensors, as their model cards round them: 8.03B, 70.6B, 405.9B, 69.0B) are the layers, both
// embedding matrices (untied) and the final RMSNorm; model_params leaves out the final norm (h).
TEST(GroupedQueryAttention, PresetsHaveTheReleasedParameterCounts) {
  struct Case {
    const char* preset;
    double params;
  };
  for (const Case& c : {Case{"llama3-8b", 8'030'261'248.0}, Case{"llama3-70b", 70'553'706'496.0},
                        Case{"llama3.1-405b", 405'853'388'800.0}, Case{"llama2-70b", 68'976'648'192.0}}) {
    const ModelSpec m = load_model(c.preset);
    EXPECT_EQ(kv_heads(m), 8) << c.preset;
    EXPECT_DOUBLE_EQ(flops::model_params(m) + m.hidden_size, c.params) << c.preset;
  }
}

// With g = a every formula is multi-head attention's: num_kv_heads = a and 0 agree everywhere.
TEST(GroupedQueryAttention, AsManyKvHeadsAsQueryHeadsIsMultiHead) {
  const ModelSpec mha = load_model("gpt3-18b");
  const ModelSpec same = with_kv(mha, mha.num_heads);
  EXPECT_DOUBLE_EQ(flops::layer_params(same), flops::layer_params(mha));
  EXPECT_DOUBLE_EQ(flops::layer_forward_flops(same, 2), flops::layer_forward_flops(mha, 2));
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(same, 2, 8, true), memory::layer_activation_bytes(mha, 2, 8, true));
  EXPECT_DOUBLE_EQ(memory::layer_weight_kept_bytes(same, 2, 8), memory::layer_weight_kept_bytes(mha, 2, 8));
  // GPT, f = 4h, g = a: Megatron-LM's 24bsh^2 matmul FLOPs and Korthikanti's 24/t sharded terms.
  const double s = mha.seq_length, h = mha.hidden_size, a = mha.num_heads;
  EXPECT_DOUBLE_EQ(flops::layer_matmul_forward_flops(mha, 1), 24 * s * h * h);
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(mha, 1, 8), s * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)));
}

// Fewer key/value heads shrink the K and V projections: QKV forward 2bsh(h + 2h_kv), K and V
// kept at g/a of their width, the QKV GEMM's output columns (h + 2h_kv)/t.
TEST(GroupedQueryAttention, KeyValueProjectionsShrinkByGOverA) {
  const ModelSpec mha = with_kv(load_model("llama3-70b"), 0);
  const ModelSpec gqa = load_model("llama3-70b");
  const double b = 1, s = gqa.seq_length, h = gqa.hidden_size, hkv = kv_hidden_size(gqa);
  EXPECT_DOUBLE_EQ(hkv, 1024);  // 8 heads of 128
  EXPECT_DOUBLE_EQ(flops::attention_block_matmul_flops(gqa, 1), 2 * b * s * h * (h + 2 * hkv) + 2 * b * s * h * h);
  EXPECT_DOUBLE_EQ(flops::attention_block_matmul_flops(mha, 1) - flops::attention_block_matmul_flops(gqa, 1),
                   4 * b * s * h * (h - hkv));
  // The attention core still runs every query head: 4bs^2h.
  EXPECT_DOUBLE_EQ(flops::layer_attention_forward_flops(gqa, 1), flops::layer_attention_forward_flops(mha, 1));
  EXPECT_DOUBLE_EQ(flops::layer_params(mha) - flops::layer_params(gqa), 2 * h * (h - hkv));
  // Activations (2 bytes): K and V were 2sbh each, now 2sbh g/a; sharded t ways.
  const int t = 8;
  EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(mha, 1, t) - memory::layer_activation_bytes(gqa, 1, t),
                   s * h * 4 * (1 - hkv / h) / t);
  // W-kept: the QKV output gradient is (h + 2h_kv)sb/t elements.
  EXPECT_DOUBLE_EQ(memory::layer_weight_kept_bytes(mha, 1, t) - memory::layer_weight_kept_bytes(gqa, 1, t),
                   s * 2 * (h - hkv) / t * gqa.bytes_per_activation);
  // Compute by shape prices fewer QKV columns: the forward of the attention block gets cheaper.
  const ClusterSpec c = load_cluster("h100-nvl-ib-64");
  EXPECT_LT(shape::layer_times(gqa, c, 1, t, false).attn_f_s, shape::layer_times(mha, c, 1, t, false).attn_f_s);
  EXPECT_DOUBLE_EQ(shape::layer_times(gqa, c, 1, t, false).mlp_f_s, shape::layer_times(mha, c, 1, t, false).mlp_f_s);
}

// Each tensor-parallel rank holds whole key/value heads (Megatron-LM's query groups), so t must
// divide g: tp 16 fails for a model with 8, naming the field; the planner never proposes it.
TEST(GroupedQueryAttention, TensorParallelDividesTheKeyValueHeads) {
  const ModelSpec m = load_model("llama3-70b");
  ClusterSpec c = load_cluster("h100-nvl-ib-64");
  c.gpus_per_node = 16;
  EXPECT_TRUE(tp_divides(m, 8));
  EXPECT_FALSE(tp_divides(m, 16));  // 64 query heads would allow it
  ParallelPlan p;
  p.tp = 16;
  p.pp = 4;
  p.dp = 1;
  p.num_microbatches = 8;
  EXPECT_NE(error_of([&] { check_fit(m, c, p); }).find("must divide the model's num_kv_heads = 8"), std::string::npos);
  stagecraft::planner::PlanSpace space;
  space.global_batch = 64;
  space.max_tp = 16;
  auto largest_tp = [&](const ModelSpec& model) {
    int t = 0;
    for (const ParallelPlan& q : stagecraft::planner::enumerate(space, model, c)) t = std::max(t, q.tp);
    return t;
  };
  EXPECT_EQ(largest_tp(m), 8);
  EXPECT_EQ(largest_tp(with_kv(m, 0)), 16);  // the same model with multi-head attention
}

TEST(GroupedQueryAttention, JsonRoundTripAndBadValues) {
  const ModelSpec m = load_model("llama3-8b");
  const nlohmann::json j = to_json(m);
  EXPECT_EQ(j["num_kv_heads"], 8);
  EXPECT_EQ(model_from_json(j).num_kv_heads, 8);
  EXPECT_FALSE(to_json(load_model("gpt3-18b")).contains("num_kv_heads"));  // multi-head: left out
  nlohmann::json bad = j;
  bad["num_kv_heads"] = 5;
  EXPECT_NE(error_of([&] { model_from_json(bad); }).find("num_kv_heads = 5 is invalid (must divide num_heads = 32"),
            std::string::npos);
  bad["num_kv_heads"] = -1;
  EXPECT_NE(error_of([&] { model_from_json(bad); }).find("num_kv_heads = -1 is invalid"), std::string::npos);
}
