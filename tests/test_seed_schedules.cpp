// The seed papers' schedules and the zero-bubble family against what the papers state:
// closed forms of the bubble and of activation memory, evaluated with unit costs and no
// communication (docs/schedules.md explains every difference with the numbers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "costmodel/fold3d_model.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/error.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

using namespace stagecraft;
using namespace stagecraft::schedules;
using costmodel::EvalResult;

namespace {

Schedule gen(const char* name, int p, int m, nlohmann::json extra = nlohmann::json::object(), int chunks = 0) {
  return test::compute_only(name, p, m, chunks, std::move(extra));
}

EvalResult unit_eval(const Schedule& compute_only, double f, double b, double r = 1, double i = 1, double w = 1) {
  Schedule s = lower(compute_only);
  costmodel::Evaluator ev(s);
  costmodel::UnitCosts u;
  u.f = f;
  u.b = b;
  u.r = r;
  u.i = i;
  u.w = w;
  return ev.evaluate(costmodel::unit_cost_table(s, u));
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

// Merak Sec. 5.1: with T_F : T_R : T_B = 1 : 1 : 2 and no communication, 1F1B
// with recomputation ahead of the gradient has bubble/compute 3(p-1)/(4m); the shifted
// critical path schedule 3(p-2)/(4m).
TEST(SeedSchedules, MerakClosedForms) {
  for (int p = 2; p <= 10; ++p)
    for (int m = 4; m <= 4 * p; ++m) {
      EvalResult e = unit_eval(gen("merak-early-recompute", p, m), 1, 2, 1);
      ASSERT_NEAR(e.bubble_over_compute, 3.0 * (p - 1) / (4.0 * m), 1e-12) << "early p=" << p << " m=" << m;
      EvalResult s = unit_eval(gen("merak", p, m), 1, 2, 1);
      ASSERT_NEAR(s.bubble_over_compute, 3.0 * (p - 2) / (4.0 * m), 1e-12) << "shifted p=" << p << " m=" << m;
    }
}

TEST(SeedSchedules, MerakPlacesRecomputeBeforeTheGradient) {
  Schedule l = lower(gen("merak", 3, 4));
  // Stage 1 (penultimate): R before RECV_B before B; the last stage never recomputes.
  std::vector<std::string> r1;
  for (const auto& a : l.actions[1]) r1.push_back(to_text(a));
  auto at = [&](const std::string& t) { return std::find(r1.begin(), r1.end(), t) - r1.begin(); };
  EXPECT_LT(at("1R0"), at("1RECV_B0"));
  EXPECT_LT(at("1RECV_B0"), at("1B0"));
  for (const auto& a : l.actions[2]) EXPECT_NE(a.op, Op::R);
  // One more forward before the first backward than 1F1B on every stage but the last.
  auto forwards_before_b = [](const std::vector<Action>& list) {
    int n = 0;
    for (const auto& a : list) {
      if (a.op == Op::B) break;
      n += a.op == Op::F;
    }
    return n;
  };
  Schedule c = gen("merak", 4, 8);
  EXPECT_EQ(forwards_before_b(c.actions[0]), 5);
  EXPECT_EQ(forwards_before_b(c.actions[2]), 3);
  EXPECT_EQ(forwards_before_b(c.actions[3]), 1);
}

// Merak Sec. 5.2: (p-1-i) alpha_i = (p-1) alpha_0, capped at 1; R carries 1 - alpha_i.
TEST(SeedSchedules, MerakStageAwareRecomputation) {
  Schedule s = gen("merak", 4, 8, {{"alpha1", 0.25}});
  std::vector<double> expect = {0.75, 1 - 0.25 * 3 / 2, 0.25, 0.0};
  for (int r = 0; r < 4; ++r) {
    double seen = 0;
    for (const auto& a : s.actions[static_cast<size_t>(r)])
      if (a.op == Op::R) seen = a.fraction;
    EXPECT_NEAR(seen, expect[static_cast<size_t>(r)], 1e-12) << "stage " << r;
  }
  EXPECT_THROW(gen("merak", 4, 8, {{"alpha1", 1.5}}), InputError);
  EXPECT_THROW(gen("merak", 4, 8, {{"alpha1", "auto"}}), InputError);  // needs a model: estimate resolves it
  EXPECT_THROW(gen("merak", 4, 3), InputError);                        // at least 4 microbatches
}

// "The largest alpha_1 that fits device memory, chosen automatically" (Merak Sec. 5.2).
TEST(SeedSchedules, MerakAutomaticAlphaFitsMemory) {
  costmodel::ModelSpec m = presets::load_model("gpt-2.5b");
  costmodel::ClusterSpec c = presets::load_cluster("merak-3090-64");
  costmodel::ParallelPlan p;
  p.dp = 8;
  p.pp = 8;
  p.microbatch_size = 4;
  p.num_microbatches = 16;
  p.schedule = "merak";
  costmodel::Estimate e = costmodel::estimate(m, c, p);
  double a = e.plan.schedule_params["alpha1"].get<double>();
  EXPECT_GT(a, 0.0);
  EXPECT_LT(a, 1.0);
  EXPECT_TRUE(e.fits);
  p.schedule_params["alpha1"] = std::min(1.0, a + 0.01);
  EXPECT_FALSE(costmodel::estimate(m, c, p).fits);
}

// Hanayo eq. (1) with T_B = 2 T_F and T_C = 0: bubble fraction (2P-2)/(3PW+P-1), derived for
// B = P microbatches. The generated schedule measures at or below it, except W = 4, P = 4
// (0.1193 against 0.1176); docs/schedules.md lists the numbers.
TEST(SeedSchedules, HanayoAgainstItsClosedForm) {
  struct Case {
    int P, W;
    double measured;
  };
  for (Case c : {Case{2, 1, 0.25}, {2, 2, 1.0 / 7}, {4, 1, 1.0 / 3}, {4, 2, 13.0 / 61}, {4, 4, 13.0 / 109}, {8, 1, 7.0 / 19},
                 {8, 2, 5.0 / 21}, {8, 4, 0.135135135135135}}) {
    EvalResult e = unit_eval(gen("hanayo", c.P, c.P, {{"waves", c.W}}), 1, 2);
    double paper = (2.0 * c.P - 2) / (3.0 * c.P * c.W + c.P - 1);
    EXPECT_NEAR(e.bubble_fraction, c.measured, 1e-9) << "P=" << c.P << " W=" << c.W;
    EXPECT_LT(e.bubble_fraction, paper + 0.002) << "P=" << c.P << " W=" << c.W;
    // More waves, smaller bubble (Hanayo Sec. 3.3).
    if (c.W > 1) {
      EvalResult fewer = unit_eval(gen("hanayo", c.P, c.P, {{"waves", c.W / 2}}), 1, 2);
      EXPECT_LT(e.bubble_fraction, fewer.bubble_fraction);
    }
  }
}

TEST(SeedSchedules, HanayoShapeAndPrefetch) {
  Schedule s = gen("hanayo", 4, 8, {{"waves", 2}});
  EXPECT_EQ(s.num_stages, 16);
  EXPECT_EQ(s.placement, PlacementKind::V);
  EXPECT_EQ(s.rank_of(7), 0);
  EXPECT_EQ(s.rank_of(8), 0);
  // Receives are posted one compute ahead: some receive sits before a compute of another
  // (stage, microbatch).
  Schedule l = lower(s);
  bool prefetched = false;
  const auto& list = l.actions[1];
  for (size_t i = 0; i + 1 < list.size(); ++i)
    if (list[i].op == Op::RECV_F && is_compute(list[i + 1].op) &&
        !(list[i + 1].stage == list[i].stage && list[i + 1].microbatch == list[i].microbatch))
      prefetched = true;
  EXPECT_TRUE(prefetched);
  EXPECT_THROW(gen("hanayo", 4, 8, {{"waves", 0}}), InputError);
  // Chimera-wave is the one-wave case.
  EXPECT_EQ(gen("chimera-wave", 4, 8).actions, gen("hanayo", 4, 8, {{"waves", 1}}).actions);
}

// FOLD3D eq. (3): T_bubble = (p-1) T_comp / (ns ms); eq. (7): AIAO holds ms*ns checkpoints;
// eq. (6): Megatron's interleaved 1F1B holds p(ns+1) - 1 (here, chunks v = ns).
TEST(SeedSchedules, Fold3dClosedForms) {
  for (int p = 2; p <= 6; ++p)
    for (int ns = 1; ns <= 3; ++ns)
      for (int m = p; m <= 2 * p; ++m) {
        EvalResult e = unit_eval(gen("fold3d", p, m, {{"segments", ns}, {"offload", false}}), 1, 2, 1);
        double C = e.compute_s[0];
        ASSERT_NEAR(e.iteration_time_s - C, costmodel::fold3d::bubble_s(C, p, ns, m), 1e-9) << "p=" << p << " ns=" << ns << " m=" << m;
        ASSERT_NEAR(e.peak_activations[0] * ns, costmodel::fold3d::aiao_checkpoints(m, ns), 1e-9);
        Schedule il = gen("interleaved-1f1b", p, 4 * p, {}, ns + (ns == 1));
        int v = ns + (ns == 1);
        EvalResult i = unit_eval(il, 1, 2);
        ASSERT_NEAR(i.peak_activations[0] * v, costmodel::fold3d::megatron_checkpoints(p, v), 1e-9) << "interleaved p=" << p << " v=" << v;
      }
}

TEST(SeedSchedules, Fold3dOffloadAndSplitReduction) {
  Schedule s = gen("fold3d", 2, 4, {{"segments", 2}});
  // Two reductions per stage: the deferred share rho = r/(2r+1) = 0.25 before the stage's
  // first forward, the rest after its last backward (FOLD3D Algorithm 2).
  const auto& l = s.actions[0];
  EXPECT_EQ(l.front().op, Op::REDUCE_GRAD);
  EXPECT_DOUBLE_EQ(l.front().fraction, 0.25);
  EXPECT_EQ(l.back().op, Op::REDUCE_GRAD);
  EXPECT_DOUBLE_EQ(l.back().fraction, 0.75);
  // With offload the GPU holds a few checkpoints; the host holds the rest.
  Schedule low = lower(s);
  costmodel::Evaluator ev(low);
  costmodel::CostTable t = costmodel::unit_cost_table(low, {1, 2, 1, 1, 1});
  for (auto& sc : t.stages) {
    sc.act_bytes = 10;
    sc.ckpt_bytes = 1;
    sc.offload_s = sc.reload_s = 0.5;  // moving all 10 bytes; a checkpoint moves 1/10 of it
  }
  EvalResult e = ev.evaluate(t);
  EXPECT_LE(e.peak_activation_bytes[0], 4 * 1 + 9 + 1e-9);  // a few checkpoints plus one recomputed microbatch
  EXPECT_GE(e.peak_host_bytes[0], 6.0 - 1e-9);              // 7 of 8 checkpoints offloaded, one reloaded early
  EXPECT_THROW(gen("fold3d", 2, 4, {{"segments", 0}}), InputError);
  // Offload per segment: the first offload_segments segments move their checkpoints, the rest stay.
  Schedule part = gen("fold3d", 2, 4, {{"segments", 3}, {"offload_segments", 1}});
  for (const auto& list : part.actions)
    for (const Action& a : list) {
      if (a.op == Op::OFFLOAD || a.op == Op::RELOAD) {
        EXPECT_EQ(a.segment, 0) << op_name(a.op) << " stage " << a.stage;
      }
    }
  int offloads = 0;
  for (const Action& a : part.actions[0]) offloads += a.op == Op::OFFLOAD;
  EXPECT_EQ(offloads, 4);  // segment 0, every microbatch
  EXPECT_EQ(part.params["offload_segments"], 1);
  EXPECT_EQ(gen("fold3d", 2, 4, {{"segments", 3}, {"offload", false}}).params["offload_segments"], 0);
  EXPECT_THROW(gen("fold3d", 2, 4, {{"segments", 3}, {"offload_segments", 4}}), InputError);
  EXPECT_THROW(gen("fold3d", 2, 4, {{"segments", 3}, {"offload", false}, {"offload_segments", 1}}), InputError);
  EXPECT_THROW(gen("fold3d", 2, 4, {{"offload", "auto"}}), InputError);  // needs a model and a cluster
}

// Memory against the papers: Chimera holds between D/2+1 and D microbatches per device
// (Li and Hoefler Sec. 3.5); Hanayo the same as 1F1B's first stage (Hanayo Sec. 3.4); ZB-H1 at
// most p, ZB-H2 at most 2p, ZB-V at most p (Qi et al. 2024).
TEST(SeedSchedules, PeakActivationsAgainstPapers) {
  for (int D : {2, 4, 6, 8}) {
    EvalResult e = unit_eval(gen("chimera", D, D), 1, 2);
    EXPECT_DOUBLE_EQ(min_of(e.peak_activations), D / 2 + 1) << D;
    EXPECT_DOUBLE_EQ(max_of(e.peak_activations), D) << D;
  }
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p}) {
      EXPECT_LE(max_of(unit_eval(gen("hanayo", p, m, {{"waves", 2}}), 1, 2).peak_activations), p + 1e-9);
      EXPECT_LE(max_of(unit_eval(gen("zb-h1", p, m), 1, 2).peak_activations), p + 1e-9);
      EXPECT_LE(max_of(unit_eval(gen("zb-h2", p, m), 1, 2).peak_activations), 2 * p + 1e-9);
      EXPECT_LE(max_of(unit_eval(gen("zb-v", p, m), 1, 2).peak_activations), p + 1e-9);
    }
}

// Zero bubble with T_F = T_I = T_W (Qi et al. 2024): ZB-H2 reaches zero bubble once m >= 2p;
// ZB-H1 beats 1F1B.
TEST(SeedSchedules, ZeroBubbleFamily) {
  for (int p : {2, 4, 8}) {
    int m = 2 * p;
    EvalResult h2 = unit_eval(gen("zb-h2", p, m), 1, 2, 1, 1, 1);
    EXPECT_NEAR(h2.bubble_fraction, 0.0, 1e-12) << p;
    EvalResult h1 = unit_eval(gen("zb-h1", p, m), 1, 2, 1, 1, 1);
    EvalResult base = unit_eval(gen("1f1b", p, m), 1, 2);
    EXPECT_LT(h1.bubble_fraction, base.bubble_fraction) << p;
  }
}

// Chimera in the paper's slots (a forward and a backward one slot each, no communication):
// D - 2 bubbles at N = D (Li and Hoefler, Sec. 3.2 and Table 2), so 2N + D - 2 slots: 10 for
// D = N = 4. Units directly concatenated (Sec. 3.5): the next unit's forwards fill the bubbles
// at the end of the one before; for D = 4 that still takes 2N + D - 2 slots, for larger D at
// most one slot more per unit after the first (what the paper's forward doubling removes).
TEST(SeedSchedules, ChimeraTakesThePapersSlots) {
  for (int D : {2, 4, 6, 8}) {
    EXPECT_DOUBLE_EQ(unit_eval(gen("chimera", D, D), 1, 1).iteration_time_s, 2 * D + D - 2) << D;
    for (int K : {2, 3}) {
      const int N = K * D;
      const double t = unit_eval(gen("chimera", D, N), 1, 1).iteration_time_s;
      EXPECT_GE(t, 2 * N + D - 2) << D << " " << N;
      EXPECT_LE(t, 2 * N + D - 2 + (D <= 4 ? 0 : K - 1)) << D << " " << N;
    }
  }
  // With the backward twice the forward the same order still fills the bubbles: 16 time units
  // at D = N = 4 against 1F1B's (N + D - 1) x 3 = 21.
  EXPECT_DOUBLE_EQ(unit_eval(gen("chimera", 4, 4), 1, 2).iteration_time_s, 16);
}

TEST(SeedSchedules, ChimeraShapeAndConstraints) {
  Schedule s = gen("chimera", 4, 8);
  EXPECT_EQ(s.num_chains, 2);
  EXPECT_EQ(s.num_stages, 8);
  EXPECT_EQ(s.rank_of(0), 0);
  EXPECT_EQ(s.rank_of(4), 3);  // up pipeline's first stage on the last device
  EXPECT_EQ(s.model_part(4), 0);
  EXPECT_THROW(gen("chimera", 3, 6), InputError);
  EXPECT_THROW(gen("chimera", 4, 6), InputError);
  // The two copies' reductions are one collective: neither starts before both are issued.
  Schedule l = lower(s);
  costmodel::EvalOptions o;
  o.iterations = 1;
  costmodel::CostTable t = costmodel::unit_cost_table(l, {1, 2, 1, 1, 1});
  for (auto& sc : t.stages) sc.reduce_grad_s = 1;
  EvalResult solo = costmodel::Evaluator(l, o).evaluate(costmodel::unit_cost_table(l, {1, 2, 1, 1, 1}));
  EvalResult with = costmodel::Evaluator(l, o).evaluate(t);
  EXPECT_GE(with.iteration_time_s, solo.iteration_time_s + 1);
}
