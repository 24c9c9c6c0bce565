// FP8 as Transformer Engine runs it (ModelSpec::fp8, docs/costmodel.md "FP8"): the transformer
// layers' linear products at the FP8 rate, their inputs and output gradients cast as memory-bound
// traffic, the inputs kept in one byte, FP8 weight copies made once per step; the attention core
// and the head in 16 bits. Closed forms by hand; refusals naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "costmodel/workload.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {
ModelSpec gpt3(bool fp8) { return stagecraft::test::model_with_fp8("gpt3-175b", fp8); }
}  // namespace

// The four linear products of a layer (and their gradients) are FP8; the attention core's
// batched products and the head's logits are not.
TEST(Fp8, LinearProductsRunAtTheFp8Rate) {
  const KernelStack& k = load_stack("megatron-lm");
  const LayerWork w = layer_work(gpt3(true), k, 1, 8, false, false);
  for (const BlockWork* b : {&w.attn_w, &w.mlp_f, &w.mlp_i, &w.mlp_w})
    for (const Gemm& g : b->gemms) EXPECT_TRUE(g.fp8);
  ASSERT_EQ(w.attn_f.gemms.size(), 4u);  // QKV, projection, then the materialised core's two
  EXPECT_TRUE(w.attn_f.gemms[0].fp8);
  EXPECT_TRUE(w.attn_f.gemms[1].fp8);
  EXPECT_FALSE(w.attn_f.gemms[2].fp8);
  EXPECT_FALSE(w.attn_f.gemms[3].fp8);
  for (const BlockWork* b : {&w.head_f, &w.head_i, &w.head_w})
    for (const Gemm& g : b->gemms) EXPECT_FALSE(g.fp8);
  EXPECT_FALSE(layer_work(gpt3(false), k, 1, 8, false, false).mlp_f.gemms[0].fp8);

  // A product that fills whole waves: its FLOPs over FP8 peak x FP8 efficiency x clock share.
  const ClusterSpec c = load_cluster("h100-ib-1024");
  ASSERT_NEAR(c.gpu_fp8_peak_flops_per_s, 1979e12, 1e9);
  ASSERT_EQ(c.gemm_max_efficiency_fp8, 0.79);
  const double m = 128 * 44, n = 256 * 3, kk = 16384;  // 132 tiles of 128 x 256: one wave
  EXPECT_NEAR(shape::gemm_s(c, m, n, kk, 1, 2, c.sustained_clock_share(), true),
              2 * m * n * kk / (c.gpu_fp8_peak_flops_per_s * c.gemm_max_efficiency_fp8 * c.sustained_clock_share()), 1e-15);
  EXPECT_LT(shape::gemm_s(c, m, n, kk, 1, 2, 1, true), 0.55 * shape::gemm_s(c, m, n, kk, 1, 2, 1, false));
}

// Forward: the inputs of QKV, the projection, up and down cast to FP8 with their transposes
// (4 bytes per element: read 2, write 1 + 1); backward: the four output gradients.
TEST(Fp8, CastsAreMemoryBoundTraffic) {
  const KernelStack& k = load_stack("megatron-lm");
  ASSERT_EQ(k.traffic.fp8_cast_transpose, 4);
  const ModelSpec m = gpt3(false);
  const double T = 2 * double(m.seq_length), h = m.hidden_size, f = m.ffn_hidden_size, t = 8;
  const LayerWork bf = layer_work(gpt3(false), k, 2, 8, false, false);
  const LayerWork f8 = layer_work(gpt3(true), k, 2, 8, false, false);
  EXPECT_NEAR(f8.attn_f.memory_bytes - bf.attn_f.memory_bytes, 4 * (T * h + T * h / t), 1);
  EXPECT_NEAR(f8.mlp_f.memory_bytes - bf.mlp_f.memory_bytes, 4 * (T * h + T * f / t), 1);
  EXPECT_NEAR(f8.attn_i.memory_bytes - bf.attn_i.memory_bytes, 4 * (T * 3 * h / t + T * h), 1);
  EXPECT_NEAR(f8.mlp_i.memory_bytes - bf.mlp_i.memory_bytes, 4 * (T * f / t + T * h), 1);
  EXPECT_EQ(f8.head_f.memory_bytes, bf.head_f.memory_bytes);
  // With sequence parallelism the replicated inputs are cast on s/t of the sequence.
  const LayerWork sp = layer_work(gpt3(true), k, 2, 8, true, false);
  const LayerWork sp0 = layer_work(gpt3(false), k, 2, 8, true, false);
  EXPECT_NEAR(sp.attn_f.memory_bytes - sp0.attn_f.memory_bytes, 4 * (T * h / t + T * h / t), 1);
}

// GPT (f = 4h, g = a), with dropout, tp t: sbh(10 + 24/t) + 5as^2b/t becomes
// sbh(8 + 19/t) + 5as^2b/t: the QKV and up inputs (replicated) and the projection's and down's
// inputs (sharded) kept in one byte.
TEST(Fp8, ActivationsKeepTheFp8Inputs) {
  const ModelSpec m = gpt3(true);
  const double s = m.seq_length, h = m.hidden_size, a = m.num_heads, b = 1, t = 8;
  const double sbh = s * b * h;
  EXPECT_NEAR(memory::layer_activation_bytes(m, 1, 8), sbh * (8 + 19 / t) + 5 * a * s * s * b / t, 1);
  EXPECT_NEAR(memory::layer_activation_bytes(gpt3(false), 1, 8), sbh * (10 + 24 / t) + 5 * a * s * s * b / t, 1);
  EXPECT_NEAR(memory::layer_activation_bytes(m, 1, 8, true), sbh * (8 + 19) / t + 5 * a * s * s * b / t, 1);
  EXPECT_EQ(memory::layer_checkpoint_bytes(m, 1, 8), memory::layer_checkpoint_bytes(gpt3(false), 1, 8));
}

// Each rank keeps an FP8 copy and an FP8 transpose of its layers' matrices (12h^2/t parameters
// per GPT layer) and makes them once per step (4 bytes of traffic each, at the achieved memory
// bandwidth), not divided by dp under a distributed optimizer.
TEST(Fp8, WeightCopiesAndTheirCasts) {
  const ClusterSpec c = load_cluster("h100-ib-1024");
  ParallelPlan p = stagecraft::test::plan_of(2, 8, 8, 16);
  p.zero = 1;
  const Estimate bf = estimate(gpt3(false), c, p), f8 = estimate(gpt3(true), c, p);
  const double h = 12288, per_layer = 12 * h * h / 8, layers = 96 / 8;
  EXPECT_NEAR(memory::layer_linear_params_per_rank(gpt3(true), 8), per_layer, 1);
  for (int r = 0; r < p.pp; ++r) {
    EXPECT_NEAR(f8.costs.static_bytes[r] - bf.costs.static_bytes[r], 2 * layers * per_layer, 1) << r;
    EXPECT_NEAR(f8.costs.optimizer_s[r] - bf.costs.optimizer_s[r],
                4 * layers * per_layer / (c.gpu_memory_bandwidth_Bps * c.memory_efficiency), 1e-12)
        << r;
  }
  // Faster, and MFU quoted against both peaks.
  EXPECT_LT(f8.eval.iteration_time_s, 0.8 * bf.eval.iteration_time_s);
  EXPECT_NEAR(f8.mfu_fp8, f8.mfu * c.gpu_peak_flops_per_s / c.gpu_fp8_peak_flops_per_s, 1e-12);
  EXPECT_EQ(bf.mfu_fp8, 0);
  EXPECT_NEAR(f8.model_flops, bf.model_flops, 1);  // the same work, counted the same way
}

TEST(Fp8, RefusedWhereItCannotRun) {
  const ParallelPlan p = stagecraft::test::plan_of(1, 8, 1, 1);
  std::string msg = error_of([&] { estimate(gpt3(true), load_cluster("hanayo-fc-a100-8"), p); });
  EXPECT_NE(msg.find("fp8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpu_fp8_peak_flops_per_s = 0"), std::string::npos) << msg;
  ClusterSpec flat = load_cluster("h100-ib-1024");
  flat.gpu_sms = 0;
  flat.gpu_boost_clock_mhz = flat.gpu_sustained_clock_mhz = 0;
  msg = error_of([&] { estimate(gpt3(true), flat, p); });
  EXPECT_NE(msg.find("flat rate"), std::string::npos) << msg;
  ModelSpec fp32 = gpt3(true);
  fp32.bytes_per_activation = 4;
  msg = error_of([&] { check(fp32); });
  EXPECT_NE(msg.find("fp8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes_per_activation = 4"), std::string::npos) << msg;
  nlohmann::json j = to_json(load_cluster("h100-ib-1024"));
  j["gemm_max_efficiency_fp8"] = 0;
  msg = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(msg.find("gemm_max_efficiency_fp8 = 0"), std::string::npos) << msg;
}
