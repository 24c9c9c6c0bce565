// Oases' per-layer tensor-parallel degrees (planner/layer_tp.h): the ILP solved with CBC equals
// the exhaustive optimum, the memory constraint binds as eq. (6) says, the objective follows
// eqs. (3)-(5), and plans outside the formulation are refused with the field named.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "planner/layer_tp.h"
#include "planner/milp.h"
#include "schedules/error.h"

namespace stagecraft {
namespace {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

// Oases' setting: tp 4 over a node of four 3090s, no pipelining, fine-grained recomputation.
ParallelPlan oases_plan(int dp, int b, int microbatches) {
  ParallelPlan p;
  p.dp = dp;
  p.tp = 4;
  p.pp = 1;
  p.microbatch_size = b;
  p.num_microbatches = microbatches;
  p.recompute = costmodel::RecomputePolicy::Full;
  p.tp_overlap = schedules::TpOverlap::Oases;
  return p;
}

ModelSpec small_model(int layers) {
  ModelSpec m = presets::load_model("oases-llama-7b");
  m.num_layers = layers;
  return m;
}

TEST(Milp, SolvesAKnapsack) {
  // max 5a + 4b + 3c with 2a + 3b + c <= 5: a = 1, b = 0, c = 1... or a, b: 9 with 5 <= 5.
  planner::Milp lp;
  const int a = lp.add_binary(-5), b = lp.add_binary(-4), c = lp.add_binary(-3);
  lp.add_le({{a, 2}, {b, 3}, {c, 1}}, 5);
  const planner::Milp::Result r = lp.solve();
  ASSERT_TRUE(r.optimal);
  EXPECT_NEAR(r.objective, -9, 1e-9);
  EXPECT_NEAR(r.x[static_cast<size_t>(a)], 1, 1e-9);
  EXPECT_NEAR(r.x[static_cast<size_t>(b)], 1, 1e-9);
  EXPECT_NEAR(r.x[static_cast<size_t>(c)], 0, 1e-9);
}

TEST(Milp, AddsUpAVariableNamedTwiceInARow) {
  planner::Milp lp;
  const int a = lp.add_binary(-1);
  lp.add_le({{a, 1}, {a, 1}}, 1);  // 2a <= 1: a = 0
  const planner::Milp::Result r = lp.solve();
  ASSERT_TRUE(r.optimal);
  EXPECT_NEAR(r.x[static_cast<size_t>(a)], 0, 1e-9);
}

TEST(Milp, ReportsInfeasible) {
  planner::Milp lp;
  const int a = lp.add_binary(1);
  lp.add_ge({{a, 1}}, 2);
  const planner::Milp::Result r = lp.solve();
  EXPECT_FALSE(r.optimal);
  EXPECT_TRUE(r.infeasible);
}

TEST(LayerTp, OptionsArePowersOfTwoWithWholeSamples) {
  const ModelSpec m = small_model(4);
  const ClusterSpec c = presets::load_cluster("oases-3090-32");
  planner::LayerTpProblem pr = planner::layer_tp_problem(m, c, oases_plan(8, 4, 1));
  ASSERT_EQ(pr.options.size(), 3u);  // b = 4 on 4 GPUs: degrees 1 (one sample each), 2, 4
  EXPECT_EQ(pr.options[0].degree, 1);
  EXPECT_EQ(pr.options[1].degree, 2);
  EXPECT_EQ(pr.options[2].degree, 4);
  EXPECT_EQ(pr.options[0].samples, 1);
  EXPECT_EQ(pr.options[0].sub_batches, 1);  // one sample does not split
  EXPECT_EQ(pr.options[1].sub_batches, 2);
  EXPECT_EQ(pr.options[0].comm_s, 0);       // degree 1: no tensor-parallel collective
  // Per GPU the same FLOPs at every degree; the weights double each time the degree halves.
  EXPECT_NEAR(pr.options[1].static_bytes / pr.options[2].static_bytes, 2, 0.05);
  // A smaller group on a smaller buffer: each collective is cheaper.
  EXPECT_LT(pr.options[1].comm_s, pr.options[2].comm_s);
  // The reshard is symmetric and free only on the diagonal.
  // Degree 1 to 4 by hand (comm.h): the 4 samples' (b, s, h) at 16 bits all-gathered over 4 GPUs
  // of a node on PCIe (25 GB/s, 5 us): 3/4 S / B + 3 x 5 us.
  EXPECT_NEAR(pr.allgather_s[0][2], 0.75 * 4 * 2048 * 4096 * 2 / 25e9 + 3 * 5e-6, 1e-12);
  EXPECT_DOUBLE_EQ(pr.allgather_s[0][2], pr.allgather_s[2][0]);
  EXPECT_EQ(planner::layer_tp_problem(m, c, oases_plan(8, 2, 2)).options.size(), 2u);  // b = 2: no degree 1
}

TEST(LayerTp, UniformChoiceCostsWhatEquationThreeSays) {
  // With one option for every layer there are no edges: m (T_V(F) + T_V(B)) + grads + optimizer.
  const ModelSpec m = small_model(3);
  const ClusterSpec c = presets::load_cluster("oases-3090-32");
  const planner::LayerTpProblem pr = planner::layer_tp_problem(m, c, oases_plan(8, 4, 2));
  const int top = static_cast<int>(pr.options.size()) - 1;
  const planner::DegreeCosts& o = pr.options.back();
  ASSERT_EQ(o.sub_batches, 2);
  double tv = 0;
  for (const double* d : {o.fwd_s, o.bwd_s}) {
    // Blocks alternate attention, MLP (forward) or MLP, attention (backward): 6 of them.
    std::vector<double> seq;
    for (int l = 0; l < 3; ++l) {
      seq.push_back(d == o.fwd_s ? d[0] : d[1]);
      seq.push_back(d == o.fwd_s ? d[1] : d[0]);
    }
    tv += seq[0] + o.comm_s;
    for (size_t n = 0; n < seq.size(); ++n) {
      if (n > 0) tv += std::max(seq[n], o.comm_s);
      tv += std::max(seq[n], o.comm_s);
    }
  }
  const planner::LayerTpBreakdown v = planner::evaluate_layer_tp(pr, {top, top, top});
  EXPECT_DOUBLE_EQ(v.reshard_s, 0);
  EXPECT_NEAR(v.time_s, 2 * tv + v.grad_exposed_s + 3 * o.optimizer_s, 1e-12);
  EXPECT_NEAR(v.tp_comm_s, 2 /*microbatches*/ * 2 /*passes*/ * 6 /*blocks*/ * 2 /*sub-batches*/ * o.comm_s, 1e-12);
}

TEST(LayerTp, ReshardingCostsAnAllGatherAndTheLostOverlap) {
  const ModelSpec m = small_model(2);
  const ClusterSpec c = presets::load_cluster("oases-3090-32");
  const planner::LayerTpProblem pr = planner::layer_tp_problem(m, c, oases_plan(8, 4, 1));
  const planner::LayerTpBreakdown up = planner::evaluate_layer_tp(pr, {1, 2});    // degree 2 then 4
  const planner::LayerTpBreakdown down = planner::evaluate_layer_tp(pr, {2, 1});  // 4 then 2
  EXPECT_GT(up.reshard_s, pr.allgather_s[1][2]);  // plus the overlap the blocked gather loses
  EXPECT_GT(down.reshard_s, pr.allgather_s[2][1]);
}

TEST(LayerTp, IlpEqualsExhaustiveOnSmallModels) {
  // Random small problems: layers, microbatches, batch and the memory left decide; the
  // memory limit is drawn between the all-lowest-degree and the uniform point so that it binds.
  std::mt19937 rng(7);
  const ClusterSpec base = presets::load_cluster("oases-3090-32");
  int mixed = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int layers = 3 + static_cast<int>(rng() % 5);  // 3..7
    const int b = (rng() % 2) ? 4 : 8;
    const int mbs = 1 + static_cast<int>(rng() % 3);
    ParallelPlan p = oases_plan(8, b, mbs);
    p.overlap_grad_reduce = rng() % 2;
    if (rng() % 3 == 0) p.tp_overlap = schedules::TpOverlap::Blocking;
    planner::LayerTpProblem pr = planner::layer_tp_problem(small_model(layers), base, p);
    std::vector<int> lowest(static_cast<size_t>(layers), 0), uniform(static_cast<size_t>(layers), static_cast<int>(pr.options.size()) - 1);
    const double lo = planner::evaluate_layer_tp(pr, uniform).memory_bytes;
    const double hi = planner::evaluate_layer_tp(pr, lowest).memory_bytes;
    pr.memory_bytes = lo + (hi - lo) * std::uniform_real_distribution<double>(0.0, 1.1)(rng);
    const planner::LayerTpSolution ilp = planner::solve_layer_tp(pr);
    const planner::LayerTpSolution ref = planner::solve_layer_tp_exhaustive(pr);
    ASSERT_FALSE(ref.degrees.empty());
    ASSERT_FALSE(ilp.degrees.empty()) << "trial " << trial;
    EXPECT_NEAR(ilp.value.time_s, ref.value.time_s, 1e-6 * ref.value.time_s) << "trial " << trial << ": ILP "
        << planner::format_degrees(ilp.degrees) << ", exhaustive " << planner::format_degrees(ref.degrees);
    EXPECT_TRUE(ilp.value.fits);
    const std::set<int> degrees(ilp.degrees.begin(), ilp.degrees.end());
    mixed += degrees.size() > 1;
  }
  EXPECT_GT(mixed, 0);  // the memory limits drawn make some optima mix degrees
}

TEST(LayerTp, NothingFitsGivesNoDegrees) {
  const ModelSpec m = small_model(3);
  planner::LayerTpProblem pr = planner::layer_tp_problem(m, presets::load_cluster("oases-3090-32"), oases_plan(8, 4, 1));
  pr.memory_bytes = pr.fixed_bytes;  // not even the layers' weights
  EXPECT_TRUE(planner::solve_layer_tp(pr).degrees.empty());
  EXPECT_TRUE(planner::solve_layer_tp_exhaustive(pr).degrees.empty());
}

TEST(LayerTp, RefusesPlansOutsideTheFormulation) {
  const ModelSpec m = small_model(4);
  const ClusterSpec c = presets::load_cluster("oases-3090-32");
  ParallelPlan p = oases_plan(4, 4, 4);
  p.pp = 2;
  try {
    planner::layer_tp_problem(m, c, p);
    FAIL() << "pp = 2 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("plan.pp = 2"), std::string::npos) << e.what();
  }
  ParallelPlan q = oases_plan(32, 4, 1);
  q.tp = 1;
  q.tp_overlap = schedules::TpOverlap::Blocking;
  EXPECT_THROW(planner::layer_tp_problem(m, c, q), InputError);
  ParallelPlan r = oases_plan(8, 4, 1);
  r.rank_order = "dp-tp-pp";
  EXPECT_THROW(planner::layer_tp_problem(m, c, r), InputError);
  EXPECT_THROW(planner::evaluate_layer_tp(planner::layer_tp_problem(m, c, oases_plan(8, 4, 1)), {0, 1}), InputError);
}

// A plan file may carry per-layer degrees; the engines run uniform tp and refuse others, naming
// the field; degrees that are not powers of two dividing tp are bad input anywhere.
TEST(LayerTp, EnginesRefusePerLayerDegreesByName) {
  const ModelSpec m = small_model(4);
  const ClusterSpec c = presets::load_cluster("oases-3090-32");
  ParallelPlan p = oases_plan(8, 4, 1);
  p.layer_tp = {4, 4, 4, 4};
  EXPECT_NO_THROW(costmodel::check_fit(m, c, p));  // uniform: the same plan
  p.layer_tp = {2, 4, 4, 4};
  try {
    costmodel::estimate(m, c, p);
    FAIL() << "per-layer degrees accepted by estimate";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layer_tp[0]"), std::string::npos) << e.what();
  }
  p.layer_tp = {4, 4, 4};
  EXPECT_THROW(costmodel::check_fit(m, c, p), InputError);  // one per layer
  p.layer_tp = {3, 4, 4, 4};
  EXPECT_THROW(costmodel::check(p), InputError);
  // The JSON round trip keeps them; a plan without them writes none.
  p.layer_tp = {2, 4, 4, 4};
  EXPECT_EQ(costmodel::plan_from_json(costmodel::to_json(p)).layer_tp, p.layer_tp);
  EXPECT_FALSE(costmodel::to_json(oases_plan(8, 4, 1)).contains("layer_tp"));
  // The planner's problem ignores what the plan carries: it chooses them.
  EXPECT_NO_THROW(planner::layer_tp_problem(m, c, p));
}

TEST(LayerTp, FormatsRunsAsOasesTableTwo) {
  EXPECT_EQ(planner::format_degrees({2, 2, 2, 4, 4}), "[[2]x3+[4]x2]");
  EXPECT_EQ(planner::format_degrees({8}), "[[8]x1]");
  EXPECT_EQ(planner::format_degrees({4, 2, 4}), "[[4]x1+[2]x1+[4]x1]");
}

}  // namespace
}  // namespace stagecraft
