// Model and hardware FLOPs utilisation (MFU, HFU) as Korthikanti et al. (MLSys 2023, Sec. 6)
// define them: model FLOPs leave recomputation out, hardware FLOPs count what the GPUs run.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/lower.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {
ParallelPlan plan(int dp, int tp, int pp, int m, RecomputePolicy r) {
  ParallelPlan p = test::plan_of(dp, tp, pp, m);
  p.microbatch_size = 2;
  p.recompute = r;
  return p;
}
}  // namespace

// Without recomputation the two counts and the two utilisations are the same.
TEST(Utilization, NoRecomputationHfuEqualsMfu) {
  Estimate e = estimate(load_model("gpt-1.4b"), load_cluster("merak-3090-64"), plan(8, 2, 4, 16, RecomputePolicy::None));
  EXPECT_DOUBLE_EQ(e.hardware_flops, e.model_flops);
  EXPECT_NEAR(e.hfu, e.mfu, 1e-12);
  // By hand (Megatron-LM SC21): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) model FLOPs, B = 8 x 2 x 16
  // = 256 samples, over 64 GPUs of 71 TFLOP/s and the iteration; below the flat rate's 0.5 of
  // the peak less 1F1B's bubble, (p-1)/(m+p-1) = 3/19 of the iteration.
  const double flops = 72.0 * 256 * 1024 * 48 * 1536 * 1536 * (1 + 1024.0 / (6 * 1536) + 50257.0 / (12 * 48 * 1536));
  EXPECT_NEAR(e.mfu, flops / (e.eval.iteration_time_s * 64 * 71e12), 1e-9 * e.mfu);
  EXPECT_LT(e.mfu, 0.5 * 16 / 19);
}

// Full recomputation of every layer: Megatron-LM SC21's 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
// hardware FLOPs (f = 4h), against 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) model FLOPs.
TEST(Utilization, FullRecomputationMatchesMegatronsFormula) {
  const ModelSpec m = load_model("gpt-1.4b");
  ASSERT_EQ(m.ffn_hidden_size, 4 * m.hidden_size);
  const ParallelPlan p = plan(8, 2, 4, 16, RecomputePolicy::Full);
  Estimate e = estimate(m, load_cluster("merak-3090-64"), p);
  const double B = static_cast<double>(p.global_batch()), s = m.seq_length, l = m.num_layers, h = m.hidden_size,
               V = m.vocab_size;
  EXPECT_NEAR(e.hardware_flops / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1.0, 1e-12);
  EXPECT_NEAR(e.model_flops / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1.0, 1e-12);
  EXPECT_NEAR(e.hfu / e.mfu, e.hardware_flops / e.model_flops, 1e-12);
  EXPECT_GT(e.hfu, e.mfu);
}

// Selective recomputation repeats only the attention core: 4 b s^2 h per layer and sample.
TEST(Utilization, SelectiveRecomputationAddsTheAttentionCore) {
  const ModelSpec m = load_model("gpt-1.4b");
  const ParallelPlan p = plan(8, 2, 4, 16, RecomputePolicy::Selective);
  Estimate e = estimate(m, load_cluster("merak-3090-64"), p);
  const double core = 4.0 * m.seq_length * m.seq_length * m.hidden_size;
  EXPECT_NEAR(e.hardware_flops - e.model_flops, static_cast<double>(p.global_batch()) * m.num_layers * core,
              1e-9 * e.model_flops);
}

// Partial recomputation (Merak's stage-aware recomputation, an R with a fraction of the stage's
// layers): each R counts its fraction of its stage's layers, for every sample of a microbatch
// and every data-parallel replica.
TEST(Utilization, RecomputedLayersFollowTheScheduleFractions) {
  const ModelSpec m = load_model("gpt-1.4b");  // 24 layers: 6 per stage over 4 stages
  ParallelPlan p = plan(3, 1, 4, 8, RecomputePolicy::None);
  schedules::Schedule s = schedules::insert_recompute(plan_schedule(p), {1.0, 0.5, 0.0, 0.0});
  const std::vector<int> layers = partition_layers(m, p, 4);
  const double expect = 3.0 * 2 * 8 * (layers[0] * 1.0 + layers[1] * 0.5);
  EXPECT_DOUBLE_EQ(recomputed_layer_samples(s, m, p), expect);
  EXPECT_DOUBLE_EQ(hardware_flops(s, m, p) - flops::model_flops_per_iteration(m, p.global_batch()),
                   expect * flops::layer_forward_flops(m, 1));
}
