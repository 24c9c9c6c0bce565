// A prediction's compute by kind (costmodel/estimate.h compute_by_kind, costs.h PassKinds): each
// rank's compute time split into matrix products, the attention core, memory-bound kernels, the
// communication a pass waits for inside it and the optimizer, from the same pricing as the
// durations (price.h block_kinds, whose sum block_s is). Checked: the kinds add up to the
// evaluator's compute time (other 0 for schedules of plain passes); a stage's passes add up to
// their durations; the materialized core costs more than the fused one and only in its kind;
// blocking tp collectives land in communication; profiled costs give no split.
#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "helpers.h"

namespace stagecraft::costmodel {
using presets::load_cluster;
using presets::load_model;
namespace {

ParallelPlan plan(int tp, int pp, const char* schedule = "1f1b") {
  ParallelPlan p;
  p.dp = 1, p.tp = tp, p.pp = pp;
  p.microbatch_size = 4;
  p.num_microbatches = 8;
  p.schedule = schedule;
  return p;
}

// One node of H100s holding exactly the plan's GPUs.
ClusterSpec one_node(const ParallelPlan& p) {
  ClusterSpec c = load_cluster("h100-ib-1024");
  c.nodes = 1;
  c.gpus_per_node = p.num_gpus();
  return c;
}

Estimate predict(const ModelSpec& m, const ParallelPlan& p) { return estimate(m, one_node(p), p); }

void expect_adds_up(const Estimate& e, const std::string& what) {
  const auto kinds = compute_by_kind(e);
  ASSERT_EQ(kinds.size(), static_cast<size_t>(e.schedule.num_ranks)) << what;
  for (size_t r = 0; r < kinds.size(); ++r) {
    const ComputeByKind& k = kinds[r];
    EXPECT_GT(k.passes.products_s, 0) << what;
    EXPECT_GT(k.passes.attention_core_s, 0) << what;
    EXPECT_GT(k.passes.memory_s, 0) << what;
    EXPECT_GT(k.optimizer_s, 0) << what;
    EXPECT_NEAR(k.passes.total_s() + k.optimizer_s + k.other_s, e.eval.compute_s[r], 1e-12) << what;
    EXPECT_NEAR(k.other_s, 0, 1e-9 * e.eval.compute_s[r]) << what << ": rank " << r << " runs plain passes only";
  }
  for (const StageCost& sc : e.costs.stages) {
    EXPECT_NEAR(sc.kinds_f.total_s(), sc.f_s, 1e-12 * sc.f_s) << what;
    EXPECT_NEAR(sc.kinds_b.total_s(), sc.b_s, 1e-12 * sc.b_s) << what;
  }
}

TEST(ComputeKinds, AddUpToTheEvaluatorsCompute) {
  const ModelSpec m = load_model("gpt-1.4b");
  expect_adds_up(predict(m, plan(1, 1)), "gpt-1.4b, one GPU");
  expect_adds_up(predict(m, plan(1, 4, "interleaved-1f1b")), "pp 4 interleaved");
  ParallelPlan sel = plan(1, 2);
  sel.recompute = RecomputePolicy::Full;
  expect_adds_up(predict(m, sel), "pp 2, full recomputation");
}

// The same layer with the core materialized (scores and softmax as tensors) instead of fused:
// only the attention core's share grows; the products outside it are the same kernels.
TEST(ComputeKinds, TheCoreKernelChangesOnlyItsKind) {
  ModelSpec m = load_model("gpt-1.4b");
  m.attention_kernel = AttentionKernel::Fused;
  const auto fused = compute_by_kind(predict(m, plan(1, 1))).front();
  m.attention_kernel = AttentionKernel::Materialized;
  const auto mat = compute_by_kind(predict(m, plan(1, 1))).front();
  EXPECT_GT(mat.passes.attention_core_s, fused.passes.attention_core_s);
  EXPECT_NEAR(mat.passes.products_s, fused.passes.products_s, 1e-9 * fused.passes.products_s);
}

// Blocking tensor-parallel all-reduces wait inside the passes: their exposed time is the
// communication kind, exactly (8 microbatches x (F's + B's) exposed collectives).
TEST(ComputeKinds, BlockingTpCollectivesAreCommunication) {
  const Estimate e = predict(load_model("gpt-1.4b"), plan(2, 1));
  const StageCost& sc = e.costs.stages.front();
  ASSERT_GT(sc.tp_exposed_f_s, 0);
  EXPECT_NEAR(compute_by_kind(e).front().passes.comm_s, 8 * (sc.tp_exposed_f_s + sc.tp_exposed_b_s),
              1e-9 * sc.tp_exposed_f_s);
}

// The products' kind against an independent total: on one GPU, GPT 1.4B's forward is, per layer,
// QKV (T x h) x (h x 3h), the projection (T x h) x (h x h), the MLP (T x h) x (h x 4h) and
// (T x 4h) x (4h x h), and the head (T x h) x (h x V), T = b s tokens; the backward repeats each
// product for the input gradient ((T x n) x (n x k)) and the weight gradient ((k x T) x (T x n)).
// Priced here product by product with shape::gemm_s at the training clock; the fused core is a
// flash kernel, not a product, so it stays out of this kind.
TEST(ComputeKinds, ProductsAreTheModelsShapesPricedOneByOne) {
  ModelSpec m = load_model("gpt-1.4b");
  m.attention_kernel = AttentionKernel::Fused;
  const Estimate e = predict(m, plan(1, 1));
  const ClusterSpec& c = e.cluster;
  const double T = 4.0 * m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size, clock = c.sustained_clock_share();
  const double shapes[][3] = {{T, 3 * h, h}, {T, h, h}, {T, f, h}, {T, h, f}};  // (m, n, k)
  auto g = [&](double a, double b, double k) { return shape::gemm_s(c, a, b, k, 1, 2, clock); };
  double fwd = 0, bwd = 0;
  for (const auto& s : shapes) {
    fwd += m.num_layers * g(s[0], s[1], s[2]);
    bwd += m.num_layers * (g(s[0], s[2], s[1]) + g(s[2], s[1], s[0]));
  }
  fwd += g(T, V, h);
  bwd += g(T, h, V) + g(h, V, T);
  const StageCost& sc = e.costs.stages.front();
  EXPECT_NEAR(sc.kinds_f.products_s, fwd, 1e-9 * fwd);
  EXPECT_NEAR(sc.kinds_b.products_s, bwd, 1e-9 * bwd);
}

}  // namespace
}  // namespace stagecraft::costmodel
