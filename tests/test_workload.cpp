// The workload (costmodel/workload.h) built once and priced (price.h) under a kernel stack
// (stack.h): what each option changes in the work, the fused attention priced from its authors'
// measured throughput, the flat-rate route's FLOPs, the overlapped parameter gather of a
// distributed optimizer in the evaluator and the simulator, the fit verdict, and the simulator's
// bytes taken from the cost table.
#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "presets/load.h"
#include "costmodel/price.h"
#include "costmodel/shape.h"
#include "costmodel/stack.h"
#include "costmodel/workload.h"
#include "helpers.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using test::error_of;

namespace {
ModelSpec fused(ModelSpec m) {
  m.attention_kernel = AttentionKernel::Fused;
  return m;
}
}  // namespace

// A fused core is one kernel: no (b, a, s, s) traffic, FLOPs halved for a causal model, and its
// time is those FLOPs at the stack's measured fraction of peak (FlashAttention-3 paper Fig. 5:
// FlashAttention-2 forward, head dim 128, causal, 4k tokens: 319 of 989 TFLOP/s on H100).
TEST(Workload, FusedAttentionIsOneKernelAtItsMeasuredThroughput) {
  const ModelSpec m = fused(load_model("gpt3-175b"));  // h 12288, 96 heads: d = 128
  ASSERT_EQ(m.hidden_size / m.num_heads, 128);
  ModelSpec m4k = m;
  m4k.seq_length = 4096;
  const KernelStack& k = load_stack("megatron-lm");
  const LayerWork w = layer_work(m4k, k, 1, 8, false, false);
  EXPECT_EQ(w.attn_f.gemms.size(), 2u);  // QKV and the projection; the core is the flash kernel
  const double full = 4.0 * 4096 * 4096 * 12288 / 8;  // 4 b s^2 h / t
  EXPECT_DOUBLE_EQ(w.attn_f.model_flops, full);
  EXPECT_DOUBLE_EQ(w.attn_f.flash_flops, full / 2);
  EXPECT_DOUBLE_EQ(w.attn_i.flash_flops, 2.5 * full / 2);
  const ClusterSpec c = load_cluster("h100-ib-1024");
  const FlashEfficiency fe = flash_efficiency(k, c.gpu_name, 128, 4096, true);
  EXPECT_TRUE(fe.exact_gpu);
  EXPECT_NEAR(fe.fwd, 319.0 / 989, 1e-12);
  BlockWork core;
  core.flash_flops = w.attn_f.flash_flops;
  // at the training clock (shape.h "Clocks"): the table's rate x sustained / boost
  EXPECT_NEAR(block_s(core, w, c, k), full / 2 / (319.0 / 989 * c.gpu_peak_flops_per_s * c.sustained_clock_share()), 1e-12);
  // Materialised, the same layer pays the score traffic and two batched products.
  ModelSpec m4k_mat = m4k;
  m4k_mat.attention_kernel = AttentionKernel::Materialized;
  const LayerWork mat = layer_work(m4k_mat, k, 1, 8, false, false);
  const double scores = 96.0 / 8 * 4096 * 4096;  // (b, a/t, s, s)
  EXPECT_NEAR(mat.attn_f.memory_bytes - w.attn_f.memory_bytes, scores * 2 * (k.traffic.softmax + k.traffic.score_dropout), 1);
  EXPECT_EQ(mat.attn_f.gemms.size(), 4u);
  EXPECT_EQ(mat.attn_f.flash_flops, 0);
}

// Interpolation in log(s) between measured sequence lengths, the nearest head dimension, and
// the backward's measured fraction (not causal: Fig. 6, head dim 128, 2k and 4k: 291, 310).
TEST(Workload, FlashEfficiencyInterpolatesTheTable) {
  const KernelStack& k = load_stack("megatron-lm");
  const FlashEfficiency at3k = flash_efficiency(k, "H100 SXM 80GB", 128, 3000, false);
  const double x = (std::log(3000) - std::log(2048)) / (std::log(4096) - std::log(2048));
  EXPECT_NEAR(at3k.bwd, (291 + x * (310 - 291)) / 989, 1e-12);
  EXPECT_NEAR(flash_efficiency(k, "H100", 100, 512, false).fwd, 309.0 / 989, 1e-12);  // nearest d: 128
  const FlashEfficiency other = flash_efficiency(k, "A100 SXM4 80GB", 128, 4096, true);
  EXPECT_FALSE(other.exact_gpu);
  EXPECT_NE(other.note.find("A100"), std::string::npos);
}

// What each option changes, and only there: dropout's masks (scores and residual), sequence
// parallelism's split of the norms and residual adds, selective recomputation's core.
TEST(Workload, OptionsChangeTheWorkInOnePlace) {
  const KernelStack& k = load_stack("megatron-lm");
  ModelSpec m = load_model("gpt3-7.5b");
  const double T = 2.0 * m.seq_length, h = m.hidden_size, e = 2, t = 4;
  const double scores = 2.0 * m.num_heads / t * m.seq_length * m.seq_length;
  const LayerWork with = layer_work(m, k, 2, 4, false, false);
  m.dropout = false;
  const LayerWork without = layer_work(m, k, 2, 4, false, false);
  EXPECT_NEAR(with.attn_f.memory_bytes - without.attn_f.memory_bytes,
              scores * e * k.traffic.score_dropout + T * h * e * (k.traffic.bias_dropout_residual - k.traffic.residual), 1);
  const LayerWork sp = layer_work(m, k, 2, 4, true, false);
  EXPECT_NEAR(without.mlp_f.memory_bytes - sp.mlp_f.memory_bytes,
              T * h * e * (k.traffic.layer_norm + k.traffic.residual) * (1 - 1 / t), 1);
  const LayerWork sel = layer_work(m, k, 2, 4, false, true);
  EXPECT_EQ(sel.attn_i.gemms.size(), without.attn_i.gemms.size() + 2);  // the core's two products again
  EXPECT_DOUBLE_EQ(sel.mlp_i.memory_bytes, without.mlp_i.memory_bytes);
}

// At the flat rate the work's FLOPs are flops.h's: the forward of the attention block (matrix
// products and core) and of the MLP, the input gradient repeating the core twice, the weight
// gradient the products; a fused core counts its model FLOPs, not the kernel's halved ones.
TEST(Workload, FlatRateCountsTheModelFlops) {
  for (const char* name : {"gpt3-7.5b", "llama3-8b"}) {
    for (bool f : {false, true}) {
      ModelSpec m = load_model(name);
      if (f) m = fused(m);
      const LayerWork w = layer_work(m, load_stack("megatron-lm"), 2, 2, false, false);
      const double mm = flops::attention_block_matmul_flops(m, 2), core = flops::layer_attention_forward_flops(m, 2);
      EXPECT_NEAR(w.attn_f.flops(), (mm + core) / 2, 1e-6 * mm) << name;
      EXPECT_NEAR(w.attn_i.flops(), (mm + 2 * core) / 2, 1e-6 * mm) << name;
      EXPECT_NEAR(w.attn_w.flops(), mm / 2, 1e-6 * mm) << name;
      EXPECT_NEAR(w.mlp_f.flops(), flops::mlp_block_forward_flops(m, 2) / 2, 1e-6 * mm) << name;
      EXPECT_NEAR(w.head_f.flops(), flops::head_forward_flops(m, 2) / 2, 1e-6 * mm) << name;
    }
  }
}

// The stack is part of the price: eager PyTorch's unfused softmax costs more than Megatron-LM's
// fused one on the same materialised layer; an unknown stack is refused with the presets.
TEST(Workload, TheStackChangesThePrice) {
  const ClusterSpec c = load_cluster("h100-ib-1024");
  const ModelSpec m = load_model("gpt3-7.5b");
  EXPECT_GT(shape::layer_times(m, c, 1, 1, false, false, "pytorch-eager").attn_f_s,
            shape::layer_times(m, c, 1, 1, false, false, "megatron-lm").attn_f_s);
  const std::string err = error_of([] { load_stack("no-such-stack"); });
  EXPECT_NE(err.find("megatron-core-te"), std::string::npos) << err;
  ParallelPlan p;
  p.num_microbatches = 1;
  p.stack = "no-such-stack";
  EXPECT_NE(error_of([&] { check(p); }).find("no-such-stack"), std::string::npos);
  nlohmann::json bad = to_json(load_stack("megatron-lm"));
  bad["flash"][0]["fwd_tflops"] = 2000;  // above the peak of 989
  EXPECT_NE(error_of([&] { stack_from_json(bad); }).find("flash[0].fwd_tflops"), std::string::npos);
}

// Megatron-Core's --overlap-param-gather: the next forward waits for the first bucket only, and
// its first compute ends no earlier than the whole gather. With pp 1 and one microbatch longer
// than the gather, the iteration saves the rest of the gather: (1 - head share) x gather.
TEST(Workload, OverlappedParameterGatherHidesAllButTheFirstBucket) {
  const ModelSpec m = load_model("gpt3-7.5b");
  ClusterSpec c = load_cluster("h100-ib-1024");
  c.nodes = 2;
  ParallelPlan p;
  p.dp = 16;
  p.num_microbatches = 4;
  p.zero = 1;
  p.grad_bucket_bytes = 100e6;
  const Estimate blocking = estimate(m, c, p);
  p.overlap_param_gather = true;
  const Estimate overlapped = estimate(m, c, p);
  const double g = blocking.costs.param_gather_s[0];
  const double share = overlapped.costs.param_gather_head_share[0];
  EXPECT_NEAR(share, 100e6 / (blocking.costs.params[0] * grad_bytes_per_param(m)), 1e-12);
  ASSERT_GT(blocking.costs.stages[0].f_s, g);
  EXPECT_NEAR(blocking.eval.iteration_time_s - overlapped.eval.iteration_time_s, (1 - share) * g, 1e-9);
  EXPECT_NEAR(overlapped.eval.exposed_dp_comm_s[0] + (1 - share) * g, blocking.eval.exposed_dp_comm_s[0], 1e-9);
  p.zero = 0;
  EXPECT_NE(error_of([&] { check(p); }).find("overlap_param_gather"), std::string::npos);
}

// Fits within the usable memory, tight over it but within the GPU's, does not fit beyond.
TEST(Workload, FitVerdict) {
  ClusterSpec c = load_cluster("h100-ib-1024");
  const double gib = 1024.0 * 1024 * 1024;
  EXPECT_EQ(fit_verdict(60 * gib, c), Fit::Fits);
  EXPECT_EQ(fit_verdict(79.7e9, c), Fit::Tight);  // a run trained at 79.7 GB predicted
  EXPECT_EQ(fit_verdict(81 * gib, c), Fit::DoesNotFit);
  EXPECT_EQ(fit_name(Fit::Tight), "tight");
}

// A stack may extend another: megatron-core-te-flash2 is megatron-lm's kernels and its
// FlashAttention-2 table with Transformer Engine's overlap SMs added, not a copy of them; a file
// that extends a preset replaces only the fields it gives.
TEST(Workload, StackExtendsAnother) {
  const KernelStack& lm = load_stack("megatron-lm");
  const KernelStack& f2 = load_stack("megatron-core-te-flash2");
  EXPECT_EQ(f2.name, "megatron-core-te-flash2");
  EXPECT_EQ(f2.flash_kernel, lm.flash_kernel);
  ASSERT_EQ(f2.flash.size(), lm.flash.size());
  for (size_t i = 0; i < lm.flash.size(); ++i) EXPECT_EQ(f2.flash[i].fwd_tflops, lm.flash[i].fwd_tflops) << i;
  EXPECT_EQ(f2.traffic.softmax, lm.traffic.softmax);
  EXPECT_EQ(lm.tp_overlap_comm_sms, 0);
  EXPECT_EQ(f2.tp_overlap_comm_sms, 16);
  EXPECT_NE(f2.source.find("Extends 'megatron-lm'"), std::string::npos);
  const KernelStack k = stack_from_json(
      nlohmann::json{{"name", "wide-softmax"}, {"extends", "pytorch-eager"}, {"memory_traffic", {{"softmax", 9}}}});
  const KernelStack& eager = load_stack("pytorch-eager");
  EXPECT_EQ(k.traffic.softmax, 9);
  EXPECT_EQ(k.traffic.bias_dropout_residual, eager.traffic.bias_dropout_residual);
  EXPECT_EQ(k.flash.size(), eager.flash.size());
  const std::string msg = error_of([] { stack_from_json(nlohmann::json{{"name", "x"}, {"extends", "no-such-stack"}}); });
  EXPECT_NE(msg.find("no-such-stack"), std::string::npos) << msg;
}
