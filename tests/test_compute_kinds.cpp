// A prediction's compute by kind (costmodel/estimate.h compute_by_kind, costs.h PassKinds): each
// rank's compute time split into matrix products, the attention core, memory-bound kernels, the
// communication a pass waits for inside it and the optimizer, from the same pricing as the
// durations (price.h block_kinds, whose sum block_s is). Checked against independent totals: each
// kind, each stage's durations and each rank's compute time against GPT 1.4B's passes priced by
// hand (shape.h's rules, the stack's traffic table), the products against flops.h's FLOPs at the
// GPU's best product rate; the materialized core costs more than the fused one and only in its
// kind; blocking tp collectives land in communication.
#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
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

// One pass's seconds by kind, priced by hand.
struct Kinds {
  double products_s = 0, core_s = 0, memory_s = 0;
  double total_s() const { return products_s + core_s + memory_s; }
  void add(const Kinds& o, double times) {
    products_s += times * o.products_s, core_s += times * o.core_s, memory_s += times * o.memory_s;
  }
};

// GPT 1.4B's layer and head on one H100 at b = 4 (T = 4096 tokens), the core materialized, with
// dropout, on megatron-lm's stack. Products one by one with shape::gemm_s at the training clock;
// the core's two batched products ((s x d) x (d x s) and (s x s) x (s x d), a = 16 heads of
// d = 96 per sample) and, backward, four; memory-bound bytes over 3.35 TB/s x 0.9, per element
// read and written: layer norm 2, bias-dropout-residual 3.5, GeLU 2, softmax 2 and score dropout
// 2.5 on the (s x s) scores, cross-entropy 3 forward and 2 backward on the logits; a backward
// moves twice its forward's (workload.h).
struct ByHand {
  Kinds layer_f, layer_b, head_f, head_b;
};

ByHand gpt_by_hand(const ModelSpec& m, const ClusterSpec& c) {
  const double s = m.seq_length, T = 4 * s, h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size;
  const double heads = 4.0 * m.num_heads, d = h / m.num_heads, e = 2;
  auto g = [&](double a, double b, double k, double batch = 1) { return shape::gemm_s(c, a, b, k, batch, 2, c.sustained_clock_share()); };
  auto mem = [&](double bytes) { return bytes / (3.35e12 * 0.9); };
  ByHand out;
  const double shapes[][3] = {{T, 3 * h, h}, {T, h, h}, {T, f, h}, {T, h, f}};  // (m, n, k)
  for (const auto& x : shapes) {
    out.layer_f.products_s += g(x[0], x[1], x[2]);
    out.layer_b.products_s += g(x[0], x[2], x[1]) + g(x[2], x[1], x[0]);  // input and weight gradients
  }
  out.layer_f.core_s = g(s, s, d, heads) + g(s, d, s, heads) + mem(heads * s * s * e * (2 + 2.5));
  out.layer_b.core_s = 2 * g(s, d, s, heads) + 2 * g(s, s, d, heads) + mem(2 * heads * s * s * e * (2 + 2.5));
  const double layer_bytes = 2 * T * h * e * (2 + 3.5) + T * f * e * 2;  // two blocks' norm and residual, GeLU
  out.layer_f.memory_s = mem(layer_bytes);
  out.layer_b.memory_s = mem(2 * layer_bytes);
  out.head_f.products_s = g(T, V, h);
  out.head_b.products_s = g(T, h, V) + g(h, V, T);
  out.head_f.memory_s = mem(T * V * e * 3 + T * h * e * 2);
  out.head_b.memory_s = mem(T * V * e * 2 + 2 * T * h * e * 2);
  return out;
}

// The compute passes this test prices: forwards, full backwards and recomputations.
bool is_pass(const schedules::Action& a) {
  return a.op == schedules::Op::F || a.op == schedules::Op::B || a.op == schedules::Op::R;
}

// A rank's passes by hand: F and B of each stage's layers (and the head on the last stage); an R
// is the forward's kinds in the share of its time the layers take (compute_by_kind's rule).
Kinds rank_by_hand(const Estimate& e, int r, const ByHand& h) {
  Kinds k;
  for (const schedules::Action& a : e.schedule.actions[static_cast<size_t>(r)]) {
    if (!is_pass(a)) continue;  // sends, reductions and the optimizer step (stage -1) are not passes
    const double n = e.costs.stages[static_cast<size_t>(a.stage)].layers;
    const double head = a.stage == e.schedule.num_stages - 1 ? 1 : 0;
    Kinds f, b;
    f.add(h.layer_f, n), f.add(h.head_f, head);
    b.add(h.layer_b, n), b.add(h.head_b, head);
    if (a.op == schedules::Op::F) k.add(f, 1);
    if (a.op == schedules::Op::B) k.add(b, 1);
    if (a.op == schedules::Op::R) k.add(f, a.fraction * n * h.layer_f.total_s() / f.total_s());
  }
  return k;
}

// The rank's matrix products' FLOPs outside the core (flops.h): a forward's once, a backward's
// twice (input and weight gradients), an R's layers once.
double rank_product_flops(const Estimate& e, int r) {
  const ModelSpec& m = e.model;
  const double layer = flops::layer_matmul_forward_flops(m, 4), head = flops::head_forward_flops(m, 4);
  double out = 0;
  for (const schedules::Action& a : e.schedule.actions[static_cast<size_t>(r)]) {
    if (!is_pass(a)) continue;
    const double n = e.costs.stages[static_cast<size_t>(a.stage)].layers;
    const double pass = n * layer + (a.stage == e.schedule.num_stages - 1 ? head : 0);
    if (a.op == schedules::Op::F) out += pass;
    if (a.op == schedules::Op::B) out += 2 * pass;
    if (a.op == schedules::Op::R) out += a.fraction * n * layer;
  }
  return out;
}

void expect_near_rel(double got, double want, const std::string& what) { EXPECT_NEAR(got, want, 1e-9 * want) << what; }

void expect_adds_up(const Estimate& e, const std::string& what) {
  const auto kinds = compute_by_kind(e);
  ASSERT_EQ(kinds.size(), static_cast<size_t>(e.schedule.num_ranks)) << what;
  const ByHand h = gpt_by_hand(e.model, e.cluster);
  const ClusterSpec& c = e.cluster;
  const double best_rate = c.gpu_peak_flops_per_s * c.gemm_max_efficiency * c.sustained_clock_share();
  for (size_t r = 0; r < kinds.size(); ++r) {
    const ComputeByKind& k = kinds[r];
    const Kinds want = rank_by_hand(e, static_cast<int>(r), h);
    const std::string rank = what + ", rank " + std::to_string(r);
    expect_near_rel(k.passes.products_s, want.products_s, rank + ": products");
    expect_near_rel(k.passes.attention_core_s, want.core_s, rank + ": attention core");
    expect_near_rel(k.passes.memory_s, want.memory_s, rank + ": memory-bound");
    // Adam's step, memory-bound (memory.h): w 2 + g 2 + master 4 + moments 8 bytes read, w, master
    // and moments written, 30 bytes a parameter at 3.35 TB/s.
    expect_near_rel(k.optimizer_s, 30 * e.costs.params[r] / 3.35e12, rank + ": optimizer");
    // The evaluator's compute time is the hand total: nothing else on the rank (other 0).
    expect_near_rel(e.eval.compute_s[r], want.total_s() + 30 * e.costs.params[r] / 3.35e12, rank + ": compute");
    EXPECT_NEAR(k.other_s, 0, 1e-9 * e.eval.compute_s[r]) << rank << " runs plain passes only";
    // Against flops.h: no product runs above the largest products' rate, and tile and wave
    // quantization costs these shapes at most a third more (the projection's weight gradient,
    // 72 tiles on 132 SMs, runs at 0.55 of it; the passes, FLOP-weighted, at 0.76 to 0.99).
    const double floor_s = rank_product_flops(e, static_cast<int>(r)) / best_rate;
    EXPECT_GE(k.passes.products_s, floor_s) << rank;
    EXPECT_LE(k.passes.products_s, 1.34 * floor_s) << rank;
  }
  for (size_t i = 0; i < e.costs.stages.size(); ++i) {
    const StageCost& sc = e.costs.stages[i];
    const double head = i + 1 == e.costs.stages.size() ? 1 : 0;
    Kinds f, b;
    f.add(h.layer_f, sc.layers), f.add(h.head_f, head);
    b.add(h.layer_b, sc.layers), b.add(h.head_b, head);
    expect_near_rel(sc.f_s, f.total_s(), what + ": stage " + std::to_string(i) + " forward");
    expect_near_rel(sc.b_s, b.total_s(), what + ": stage " + std::to_string(i) + " backward");
    expect_near_rel(sc.kinds_f.products_s, f.products_s, what + ": stage " + std::to_string(i) + " forward products");
    expect_near_rel(sc.kinds_b.memory_s, b.memory_s, what + ": stage " + std::to_string(i) + " backward memory-bound");
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
  // By hand (comm.h): 2 x 48 all-reduces a forward, each of (b, s, h) at 16 bits over 2 GPUs on
  // NVSwitch, S / (450 GB/s x 0.82) + 2 x 2 us; blocking, all of them exposed.
  ASSERT_NEAR(sc.tp_exposed_f_s, 96 * (4.0 * 1024 * 1536 * 2 / (450e9 * 0.82) + 2 * 2e-6), 1e-12);
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
