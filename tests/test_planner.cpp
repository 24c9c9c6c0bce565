// The planner (planner/): its best plan is the exhaustive optimum of its space, the memory
// bound never prunes a plan that fits, and `stagecraft plan` writes a plan estimate reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "runtime/support/rules.h"
#include "helpers.h"
#include "planner/balance.h"
#include "planner/bounds.h"
#include "planner/search.h"

namespace stagecraft {
namespace {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;
using planner::PlanSpace;

ClusterSpec h100_nodes(int nodes) {
  ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = nodes;
  return c;
}

PlanSpace small_space(long global_batch) {
  PlanSpace s;
  s.global_batch = global_batch;
  s.microbatch_sizes = {1, 2, 4};
  s.schedules = {{"1f1b", 0}, {"interleaved-1f1b", 2}, {"gpipe", 0}, {"zb-h1", 0}};
  return s;
}

// Every point of the space that the plan checks accept, through costmodel::estimate (no
// cache, no bound).
std::vector<costmodel::Estimate> estimates_of(const ModelSpec& m, const ClusterSpec& c, const PlanSpace& s) {
  std::vector<costmodel::Estimate> out;
  for (const ParallelPlan& p : planner::enumerate(s, m, c)) {
    try {
      out.push_back(costmodel::estimate(m, planner::plan_cluster(c, s), p));
    } catch (const InputError&) {
    }
  }
  return out;
}

// The reference: the fastest of them that fits.
double exhaustive_best_s(const ModelSpec& m, const ClusterSpec& c, const PlanSpace& s, ParallelPlan* best) {
  double t = -1;
  for (const costmodel::Estimate& e : estimates_of(m, c, s)) {
    if (e.fits && (t < 0 || e.eval.iteration_time_s < t)) {
      t = e.eval.iteration_time_s;
      *best = e.plan;
    }
  }
  return t;
}

// Without stage balancing the planner's best is the exhaustive optimum of `estimate` over the
// space; with it, the best is at least as fast, equal to `estimate` of its own plan (balanced
// stage layers included), and pruning changes nothing.
TEST(Planner, BestEqualsTheExhaustiveOptimum) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  const ClusterSpec c = h100_nodes(2);
  const PlanSpace s = small_space(32);
  planner::SearchOptions uniform;
  uniform.balance = false;
  planner::SearchResult u = planner::search(m, c, s, uniform);
  ASSERT_FALSE(u.best.empty());
  ParallelPlan ref;
  const double t = exhaustive_best_s(m, c, s, &ref);
  EXPECT_NEAR(u.best.front().iteration_time_s, t, 1e-9 * t);
  EXPECT_EQ(costmodel::to_json(u.best.front().plan), costmodel::to_json(ref));
  EXPECT_GT(u.stats.considered, 100);
  EXPECT_EQ(u.stats.considered, u.stats.pruned + u.stats.bounded + u.stats.rejected + u.stats.evaluated);

  planner::SearchResult r = planner::search(m, c, s);
  EXPECT_LE(r.best.front().iteration_time_s, t);
  // Balanced variants: some, and at most one for each point of two or more stages per pipeline
  // whose memory bound let it through (the variant moves layers between stages).
  long multi_stage = 0;
  for (const ParallelPlan& p : planner::enumerate(s, m, c))
    multi_stage += costmodel::plan_schedule(p).stages_per_chain() >= 2 && planner::memory_lower_bound_bytes(m, p) <= c.gpu_memory_bytes;
  EXPECT_GE(r.stats.balanced, 1);
  EXPECT_LE(r.stats.balanced, multi_stage);
  EXPECT_EQ(r.stats.considered + r.stats.balanced, r.stats.pruned + r.stats.bounded + r.stats.rejected + r.stats.evaluated);
  const costmodel::Estimate own = costmodel::estimate(m, c, r.best.front().plan);
  EXPECT_NEAR(own.eval.iteration_time_s, r.best.front().iteration_time_s, 1e-9 * t);
  planner::SearchOptions all;
  all.prune = false;
  planner::SearchResult unpruned = planner::search(m, c, s, all);
  EXPECT_EQ(costmodel::to_json(unpruned.best.front().plan), costmodel::to_json(r.best.front().plan));
  for (size_t i = 1; i < r.best.size(); ++i) EXPECT_LE(r.best[i - 1].iteration_time_s, r.best[i].iteration_time_s);
}

// For each value of a choice the space varies (here the zero stage), the search reports its
// fastest plan that fits and its counts: what an exhaustive pass of `estimate` over the points
// with that value finds; the best plan's own value reports the best.
TEST(Planner, ChoicesReportEachValuesFastest) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  const ClusterSpec c = h100_nodes(2);
  PlanSpace s = small_space(32);
  s.zero = {0, 1, 3};
  planner::SearchOptions o;
  o.balance = false;
  o.prune = false;
  o.bound = false;  // every point evaluated: the counts are the exhaustive pass's
  const planner::SearchResult r = planner::search(m, c, s, o);
  ASSERT_EQ(r.choices.size(), 3u);
  const std::vector<costmodel::Estimate> all = estimates_of(m, c, s);
  for (int z : {0, 1, 3}) {
    const planner::ChoiceBest& ch = r.choices[static_cast<size_t>(z == 3 ? 2 : z)];
    EXPECT_EQ(ch.choice, "zero " + std::to_string(z));
    // Plans that fit in the usable memory and tight ones (within the GPU's) are counted apart;
    // the fastest that fits is the choice's best, a tight one only where none fits (issue 52).
    long evaluated = 0, fitting = 0, tight = 0;
    double fastest = 0, fastest_tight = 0;
    for (const costmodel::Estimate& e : all) {
      if (e.plan.zero != z) continue;
      ++evaluated;
      if (e.fit == costmodel::Fit::Tight) {
        ++tight;
        if (fastest_tight == 0 || e.eval.iteration_time_s < fastest_tight) fastest_tight = e.eval.iteration_time_s;
      }
      if (e.fit != costmodel::Fit::Fits) continue;
      ++fitting;
      if (fastest == 0 || e.eval.iteration_time_s < fastest) fastest = e.eval.iteration_time_s;
    }
    if (fitting == 0) fastest = fastest_tight;
    EXPECT_EQ(ch.evaluated, evaluated) << ch.choice;
    EXPECT_EQ(ch.fitting, fitting) << ch.choice;
    EXPECT_EQ(ch.tight, tight) << ch.choice;
    ASSERT_EQ(ch.best.has_value(), fitting + tight > 0) << ch.choice;
    if (ch.best) EXPECT_NEAR(ch.best->iteration_time_s, fastest, 1e-9 * fastest) << ch.choice;
  }
  const planner::ChoiceBest& own = r.choices[static_cast<size_t>(r.best.front().plan.zero == 3 ? 2 : r.best.front().plan.zero)];
  ASSERT_TRUE(own.best);
  EXPECT_EQ(own.best->iteration_time_s, r.best.front().iteration_time_s);
  PlanSpace one = small_space(32);
  one.zero = {1};
  EXPECT_TRUE(planner::search(m, c, one, o).choices.empty());  // one value each: nothing to report
}

// The bound is below the evaluated peak of every plan, so a pruned plan cannot fit: checked on
// random spaces (model, nodes, batch) by evaluating what the bound prunes.
TEST(Planner, PruningNeverDropsAPlanThatFits) {
  std::mt19937 rng(12);
  const std::vector<std::string> models = {"gpt3-7.5b", "gpt3-18b", "gpt3-39b", "llama-7b"};
  long pruned_checked = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const ModelSpec m = presets::load_model(models[rng() % models.size()]);
    const ClusterSpec c = h100_nodes(1 + static_cast<int>(rng() % 2));
    PlanSpace s = small_space(8L << (rng() % 3));
    s.schedules = {{"1f1b", 0}};
    for (const costmodel::Estimate& e : estimates_of(m, c, s)) {
      const ParallelPlan& p = e.plan;
      const double bound = planner::memory_lower_bound_bytes(m, p);
      EXPECT_LE(bound, e.max_memory_bytes * (1 + 1e-12)) << m.name << " " << costmodel::to_json(p).dump();
      if (bound > c.gpu_memory_bytes) {
        ++pruned_checked;
        EXPECT_FALSE(e.fits) << m.name << " " << costmodel::to_json(p).dump();
      }
    }
  }
  EXPECT_GT(pruned_checked, 0);  // the check saw pruned plans
}

// The dynamic program against every partition on small cases.
TEST(PlannerBalance, DynamicProgramFindsTheBruteForceBottleneck) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int layers = 2 + static_cast<int>(rng() % 11), stages = 1 + static_cast<int>(rng() % std::min(layers, 5));
    planner::StageTimeModel tm{1.0, 0.1 * (rng() % 30), 0.25 * (rng() % 20)};
    auto bottleneck = [&](const std::vector<int>& part) {
      double worst = 0;
      for (size_t i = 0; i < part.size(); ++i) worst = std::max(worst, tm.stage_s(part[i], i == 0, i + 1 == part.size()));
      return worst;
    };
    // Every composition of `layers` into `stages` positive parts.
    double brute = 1e300;
    std::vector<int> part(static_cast<size_t>(stages), 1);
    std::function<void(int, int)> rec = [&](int i, int left) {
      if (i == stages - 1) {
        part[static_cast<size_t>(i)] = left;
        brute = std::min(brute, bottleneck(part));
        return;
      }
      for (int k = 1; k <= left - (stages - 1 - i); ++k) {
        part[static_cast<size_t>(i)] = k;
        rec(i + 1, left - k);
      }
    };
    rec(0, layers);
    const std::vector<int> dp = planner::balance_stages(layers, stages, tm);
    ASSERT_EQ(static_cast<int>(dp.size()), stages);
    int sum = 0;
    for (int k : dp) {
      EXPECT_GE(k, 1);
      sum += k;
    }
    EXPECT_EQ(sum, layers);
    EXPECT_DOUBLE_EQ(bottleneck(dp), brute) << layers << " layers, " << stages << " stages";
  }
  EXPECT_NE(test::error_of([] { planner::balance_stages(3, 4, {}); }).find("3 layers over 4 stages is invalid"), std::string::npos);
}

// A head worth about two layers (GPT 1.4B: V = 50257 against h = 2048) moves layers off the
// last stage.
TEST(PlannerBalance, TheHeadStageGetsFewerLayers) {
  const ModelSpec m = presets::load_model("gpt-1.4b");
  ClusterSpec c = h100_nodes(1);
  ParallelPlan p;
  p.pp = 4;
  p.dp = 2;
  p.num_microbatches = 8;
  const costmodel::Estimate e = costmodel::estimate(m, c, p);
  const planner::StageTimeModel tm = planner::stage_time_model(e.costs, false);
  EXPECT_GT(tm.head_s, tm.layer_s);
  const std::vector<int> bal = planner::balance_stages(m.num_layers, 4, tm);
  EXPECT_LT(bal.back(), m.num_layers / 4);
  ParallelPlan q = p;
  q.stage_layers = bal;
  EXPECT_LT(costmodel::estimate(m, c, q).eval.iteration_time_s, e.eval.iteration_time_s);
}

TEST(Planner, BadSpacesAreRefused) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  const ClusterSpec c = h100_nodes(2);
  PlanSpace s = small_space(32);
  s.gpus = 24;
  EXPECT_NE(test::error_of([&] { planner::enumerate(s, m, c); }).find("gpus = 24 is invalid"), std::string::npos);
  s = small_space(0);
  EXPECT_NE(test::error_of([&] { planner::enumerate(s, m, c); }).find("global_batch = 0 is invalid"), std::string::npos);
  s = small_space(32);
  s.zero = {4};
  EXPECT_NE(test::error_of([&] { planner::enumerate(s, m, c); }).find("zero = 4 is invalid"), std::string::npos);
  s = small_space(32);
  s.shard_groups = {-8};
  EXPECT_NE(test::error_of([&] { planner::enumerate(s, m, c); }).find("shard_groups = -8 is invalid"), std::string::npos);
}

// Tensor-parallel overlap modes join the space where tp > 1; modes that split a microbatch need
// an even microbatch size, and the plan check refuses the others (counted, not evaluated).
TEST(Planner, TensorParallelOverlapModes) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  PlanSpace s = small_space(16);
  s.schedules = {{"1f1b", 0}};
  s.tp_overlap = {schedules::TpOverlap::Blocking, schedules::TpOverlap::Oases};
  planner::SearchOptions all;
  all.top_k = 1000;
  all.balance = false;
  planner::SearchResult r = planner::search(m, h100_nodes(1), s, all);
  bool oases = false;
  for (const planner::Candidate& c : r.best) {
    if (c.plan.tp_overlap != schedules::TpOverlap::Oases) continue;
    oases = true;
    EXPECT_GT(c.plan.tp, 1);
    EXPECT_EQ(c.plan.microbatch_size % 2, 0);
    const costmodel::Estimate e = costmodel::estimate(m, h100_nodes(1), c.plan);
    EXPECT_NEAR(e.eval.iteration_time_s, c.iteration_time_s, 1e-9 * c.iteration_time_s);
  }
  EXPECT_TRUE(oases);
  // Refused: exactly the points at b = 1 with the splitting mode that the memory bound let through.
  long odd = 0;
  for (const ParallelPlan& p : planner::enumerate(s, m, h100_nodes(1)))
    odd += p.tp_overlap == schedules::TpOverlap::Oases && p.microbatch_size % 2 == 1 &&
           planner::memory_lower_bound_bytes(m, p) <= h100_nodes(1).gpu_memory_bytes;
  EXPECT_GT(odd, 0);
  EXPECT_EQ(r.stats.rejected, odd);
}

// Fewer GPUs than the cluster has: its first ones, whole nodes first.
TEST(Planner, PlansOnASubsetOfTheCluster) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  PlanSpace s = small_space(32);
  s.gpus = 8;
  planner::SearchResult r = planner::search(m, h100_nodes(4), s);
  EXPECT_EQ(r.cluster.num_gpus(), 8);
  ASSERT_FALSE(r.best.empty());
  EXPECT_EQ(r.best.front().plan.num_gpus(), 8);
}

TEST(PlannerCli, WritesAPlanThatEstimateReads) {
  const std::string out = test::scratch_path("plan_best.json");
  test::RunResult r = test::run_cli("plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 16 --global-batch 32 --top 3 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("searched"), std::string::npos) << r.out;
  test::RunResult e = test::run_cli("estimate --model gpt3-7.5b --cluster h100-nvl-ib-64 --plan " + out + " --json");
  std::remove(out.c_str());
  ASSERT_EQ(e.exit_code, 0) << e.err;  // 16 GPUs of the 64: the first two nodes
  test::RunResult first = test::run_cli("plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 16 --global-batch 32 --top 1 --json");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const double planned = nlohmann::json::parse(first.out)["best"][0]["iteration_time_s"];
  EXPECT_NEAR(nlohmann::json::parse(e.out)["iteration_time_s"].get<double>(), planned, 1e-9 * planned);
  const auto parsed = nlohmann::json::parse(first.out);
  EXPECT_EQ(parsed["gpus"], 16);
  EXPECT_EQ(parsed["best"].size(), 1u);
}

// Every estimate option that changes a price is a plan option (issue 36): the profile prices the
// search as `estimate --profile` prices a plan, and the buckets, the reduction start and
// preemptive communication go into every plan and its file.
TEST(PlannerCli, EstimatesPricingOptionsArePlanOptions) {
  const std::string out = test::scratch_path("plan_profiled.json");
  const std::string profile = test::data_path("profile/synthetic-tiny.json");
  test::RunResult r = test::run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --top 1 --json --profile " + profile +
                                    " --grad-bucket-mb 4 --grad-reduce-at stage-end --preemptive-comm --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double planned = nlohmann::json::parse(r.out)["best"][0]["iteration_time_s"];
  const nlohmann::json file = nlohmann::json::parse(test::read_text(out));
  EXPECT_EQ(file["grad_bucket_bytes"].get<double>(), 4.0 * 1024 * 1024);
  EXPECT_EQ(file["grad_reduce_at"], "stage-end");
  EXPECT_EQ(file["preemptive_comm"], true);
  test::RunResult e = test::run_cli("estimate --model tiny --cluster local-cpu-2 --json --profile " + profile + " --plan " + out);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(nlohmann::json::parse(e.out)["iteration_time_s"].get<double>(), planned, 1e-9 * planned);
  test::RunResult analytic = test::run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --top 1 --json");
  ASSERT_EQ(analytic.exit_code, 0) << analytic.err;
  EXPECT_GT(std::fabs(nlohmann::json::parse(analytic.out)["best"][0]["iteration_time_s"].get<double>() / planned - 1), 0.1);
  std::remove(out.c_str());
  test::RunResult bad = test::run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --grad-reduce-at never");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--grad-reduce-at"), std::string::npos) << bad.err;
}

// --gpus with several counts: the best plan of each, with the time to train --tokens.
TEST(PlannerCli, SweepsGpuCounts) {
  test::RunResult r = test::run_cli(
      "plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 8,16 --global-batch 32 --tokens 1e9 --schedules 1f1b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["gpus"], 8);
  EXPECT_EQ(rows[1]["best"]["dp"].get<int>() * rows[1]["best"]["tp"].get<int>() * rows[1]["best"]["pp"].get<int>(), 16);
  for (const auto& row : rows) {
    const double tps = row["tokens_per_s"], train = row["train_s"];
    EXPECT_NEAR(train, 1e9 / tps, 1e-9 * train);
    EXPECT_NEAR(row["gpu_hours"].get<double>(), row["gpus"].get<int>() * train / 3600, 1e-6);
  }
  EXPECT_LT(rows[1]["iteration_time_s"].get<double>(), rows[0]["iteration_time_s"].get<double>());
  for (const auto& row : rows)
    EXPECT_NEAR(row["tokens_per_gpu_hour"].get<double>(), row["tokens_per_s"].get<double>() * 3600 / row["gpus"].get<int>(), 1e-3);
  // A doubling range names the same counts.
  test::RunResult range = test::run_cli(
      "plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 8-16 --global-batch 32 --tokens 1e9 --schedules 1f1b --json");
  ASSERT_EQ(range.exit_code, 0) << range.err;
  EXPECT_EQ(nlohmann::json::parse(range.out), rows);
}

#ifdef STAGECRAFT_HAVE_SIM
// --verify sim: the top plans again on the simulator, its times beside the evaluator's.
TEST(PlannerCli, VerifiesTheTopPlansOnTheSimulator) {
  test::RunResult r = test::run_cli(
      "plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 8 --global-batch 16 --schedules 1f1b --top 3 --verify sim --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto best = nlohmann::json::parse(r.out)["best"];
  ASSERT_EQ(best.size(), 3u);
  for (const auto& c : best) {
    const double ev = c["iteration_time_s"], sm = c["simulated_iteration_time_s"];
    EXPECT_NEAR(sm, ev, 0.05 * ev);
  }
  // One plan: no rank correlation to give (it needs two), the difference alone.
  r = test::run_cli("plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 8 --global-batch 16 --schedules 1f1b --top 1 --verify sim");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("simulator against evaluator over the top 1: largest difference"), std::string::npos) << r.out;
}
#endif

// --tp, --pp and --rank-orders restrict the space; every plan found honours them.
TEST(PlannerSpace, FixedDegreesAndRankOrders) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  PlanSpace s = small_space(32);
  s.gpus = 16;
  s.tp_degrees = {2, 4};
  s.pp_degrees = {2};
  s.rank_orders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp"};
  const std::vector<ParallelPlan> points = planner::enumerate(s, m, h100_nodes(2));
  ASSERT_FALSE(points.empty());
  std::set<std::string> orders;
  for (const ParallelPlan& p : points) {
    EXPECT_TRUE(p.tp == 2 || p.tp == 4);
    EXPECT_EQ(p.pp, 2);
    orders.insert(p.rank_order);
  }
  EXPECT_EQ(orders.size(), 3u);
  // tp across the dp neighbours (dp-tp-pp) puts the tp group on slower links: never the best.
  const planner::SearchResult r = planner::search(m, h100_nodes(2), s);
  ASSERT_FALSE(r.best.empty());
  EXPECT_NE(r.best.front().plan.rank_order, "dp-tp-pp");
}

// Merak and FOLD3D place their own recomputation: under the plan's none and full they are the
// same schedule at the same price, so the space holds them once (under none), while 1F1B keeps both.
TEST(PlannerSpace, OwnRecomputationIsOnePoint) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  PlanSpace s = small_space(32);
  s.gpus = 16;
  s.schedules = {{"1f1b", 0}, {"merak", 0}, {"fold3d-aiao", 0}};
  s.recompute = {costmodel::RecomputePolicy::None, costmodel::RecomputePolicy::Full};
  std::map<std::string, std::set<costmodel::RecomputePolicy>> seen;
  for (const ParallelPlan& p : planner::enumerate(s, m, h100_nodes(2))) seen[p.schedule].insert(p.recompute);
  EXPECT_EQ(seen["1f1b"].size(), 2u);
  EXPECT_EQ(seen["merak"], std::set<costmodel::RecomputePolicy>{costmodel::RecomputePolicy::None});
  EXPECT_EQ(seen["fold3d-aiao"], std::set<costmodel::RecomputePolicy>{costmodel::RecomputePolicy::None});
  // What was dropped was a duplicate: each merak point under full prices exactly as under none.
  const costmodel::ClusterSpec c = planner::plan_cluster(h100_nodes(2), s);
  int checked = 0;
  for (ParallelPlan p : planner::enumerate(s, m, h100_nodes(2))) {
    if (p.schedule != "merak" || p.num_microbatches < 4 || checked >= 3) continue;  // merak needs 4 (Merak Sec. 5.1)
    const costmodel::Estimate none = costmodel::estimate(m, c, p);
    p.recompute = costmodel::RecomputePolicy::Full;
    EXPECT_DOUBLE_EQ(costmodel::estimate(m, c, p).eval.iteration_time_s, none.eval.iteration_time_s);
    EXPECT_DOUBLE_EQ(costmodel::estimate(m, c, p).max_memory_bytes, none.max_memory_bytes);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  // With full alone in the space, merak stays (under full).
  s.recompute = {costmodel::RecomputePolicy::Full};
  bool merak = false;
  for (const ParallelPlan& q : planner::enumerate(s, m, h100_nodes(2))) merak = merak || q.schedule == "merak";
  EXPECT_TRUE(merak);
}

// Parameters the cost model chooses are settled as estimate settles them: merak's alpha1 "auto"
// becomes the largest share that fits (Merak Sec. 5.2), not a refused plan.
TEST(PlannerSpace, SettlesAutoScheduleParameters) {
  const ModelSpec m = presets::load_model("gpt-2.5b");
  ClusterSpec c = presets::load_cluster("merak-3090-64");
  PlanSpace s;
  s.gpus = 8;
  s.global_batch = 32;
  s.tp_degrees = {1};
  s.pp_degrees = {4};
  s.microbatch_sizes = {2};
  s.recompute = {costmodel::RecomputePolicy::Full};
  s.zero = {0};
  s.schedules = {{"merak", 0, {{"alpha1", "auto"}}}};
  const planner::SearchResult r = planner::search(m, c, s);
  EXPECT_EQ(r.stats.rejected, 0);
  ASSERT_FALSE(r.best.empty());
  const auto& alpha = r.best.front().plan.schedule_params["alpha1"];
  ASSERT_TRUE(alpha.is_number()) << alpha.dump();
  EXPECT_GE(alpha.get<double>(), 0.0);
  EXPECT_LE(alpha.get<double>(), 1.0);
  ParallelPlan p = r.best.front().plan;
  p.schedule_params["alpha1"] = "auto";
  p.stage_layers = r.best.front().plan.stage_layers;
  EXPECT_NEAR(costmodel::estimate(m, planner::plan_cluster(c, s), p).eval.iteration_time_s, r.best.front().iteration_time_s,
              1e-9 * r.best.front().iteration_time_s);
}

// --layer-tp: Oases' per-layer degrees for the top plans with pp = 1, in the JSON beside them.
TEST(PlannerCli, PerLayerDegreesForPlansWithoutPipelining) {
  test::RunResult r = test::run_cli(
      "plan --model oases-llama-7b --cluster oases-3090-32 --global-batch 32 --tp 4 --pp 1 --tp-overlaps blocking "
      "--recompute full --schedules 1f1b --microbatch-sizes 4 --zero 0 --sequence-parallel off --layer-tp --top 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto best = nlohmann::json::parse(r.out)["best"][0];
  ASSERT_TRUE(best.contains("layer_tp")) << r.out;
  const auto& lt = best["layer_tp"];
  EXPECT_EQ(lt["degrees"].size(), 16u);
  EXPECT_LE(lt["time_s"].get<double>(), lt["uniform_time_s"].get<double>());
  EXPECT_LE(lt["memory_bytes"].get<double>(), 24.0 * 1024 * 1024 * 1024);
  // The plan file stays uniform: estimate runs it.
  EXPECT_FALSE(best["plan"].contains("layer_tp"));
}

// Progress on standard error (points done, time elapsed); --quiet silences it, and standard
// output is the same either way.
TEST(PlannerCli, ReportsProgressUnlessQuiet) {
  const std::string args = "plan --model gpt3-7.5b --cluster h100-nvl-ib-64 --gpus 8 --global-batch 16 --schedules 1f1b --json";
  test::RunResult loud = test::run_cli(args);
  test::RunResult quiet = test::run_cli(args + " --quiet");
  ASSERT_EQ(loud.exit_code, 0) << loud.err;
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_NE(loud.err.find("plan: points"), std::string::npos) << loud.err;
  EXPECT_NE(loud.err.find("elapsed"), std::string::npos) << loud.err;
  EXPECT_EQ(quiet.err, "");
  auto strip = [](nlohmann::json j) {
    j["stats"].erase("seconds");
    return j;
  };
  EXPECT_EQ(strip(nlohmann::json::parse(loud.out)), strip(nlohmann::json::parse(quiet.out)));
}

TEST(PlannerCli, BadInputExitsTwo) {
  for (const char* args : {"--gpus 72 --global-batch 32", "--global-batch 32 --schedules hanayo:2x","--global-batch 0", "--global-batch 32 --schedules nosuch",
                                  "--global-batch 32 --sequence-parallel maybe", "--global-batch 32 --microbatch-sizes x",
                                  "--gpus 8,16 --global-batch 32 --out x.json", "--global-batch 32 --verify eyes",
                                  "--global-batch 32 --tp-overlaps sideways", "--global-batch 32 --rank-orders tp-dp",
                                  "--global-batch 32 --tp 0", "--global-batch 32 --pp x",
                                  "--gpus 8,16 --global-batch 32 --layer-tp", "--gpus 16-8 --global-batch 32",
                                  // issue 36: input errors, not "no plan fits" (32 heads, 32 layers)
                                  "--global-batch 32 --tp 3", "--global-batch 32 --pp 1000",
                                  "--global-batch 32 --schedules hanayo:wavez=2", "--gpus 64 --global-batch 3 --microbatch-sizes 2"}) {
    test::RunResult r = test::run_cli("plan --model gpt3-7.5b --cluster h100-nvl-ib-64 " + std::string(args));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
// Precision as a dimension of the planner's space: each point priced in bf16 and in FP8, the
// candidates marked; on H100 the FP8 plans lead (their products at twice the rate). A GPU
// without FP8 refuses the dimension, naming it.
TEST(PlannerSpace, PrecisionIsADimension) {
  planner::PlanSpace s;
  s.gpus = 8;
  s.global_batch = 16;
  s.schedules = {{"1f1b", 0}};
  s.microbatch_sizes = {1};
  s.fp8 = {false, true};
  ModelSpec m = presets::load_model("llama3-8b");
  const ClusterSpec c = test::cluster_of("h100-ib-1024", 1);
  planner::SearchOptions o;
  o.top_k = 1000;
  const planner::SearchResult r = planner::search(m, c, s, o);
  ASSERT_FALSE(r.best.empty());
  EXPECT_TRUE(r.best.front().fp8);
  EXPECT_EQ(r.stats.considered % 2, 0);
  bool bf16 = false;
  for (const auto& cand : r.best) bf16 = bf16 || !cand.fp8;
  EXPECT_TRUE(bf16);  // both precisions were priced
  // The best FP8 candidate is what estimate says of it with --fp8.
  ModelSpec f8 = m;
  f8.fp8 = true;
  EXPECT_DOUBLE_EQ(costmodel::estimate(f8, r.cluster, r.best.front().plan).eval.iteration_time_s, r.best.front().iteration_time_s);
  const std::string msg = test::error_of([&] { planner::search(m, presets::load_cluster("hanayo-fc-a100-8"), s, o); });
  EXPECT_NE(msg.find("precisions = fp8 is invalid"), std::string::npos) << msg;
}

// llama3-8b on eight GPUs without tensor or pipeline parallelism, selective recomputation:
// replicated weights and gradients (zero 1: 2 + g + 12/8 bytes per parameter) leave too little
// of the usable 68 GB for two sequences of 8,192 tokens' activations (89 GiB in all); sharded
// parameters fit (65 GiB), and the search says so by choosing them.
TEST(PlannerSpace, ChoosesShardedParametersWhereTheyAloneFit) {
  const ModelSpec m = presets::load_model("llama3-8b");
  planner::PlanSpace s;
  s.gpus = 8;
  s.global_batch = 16;
  s.schedules = {{"1f1b", 0}};
  s.microbatch_sizes = {1};
  s.recompute = {costmodel::RecomputePolicy::Selective};
  s.zero = {0, 1, 3};
  s.tp_degrees = {1};
  s.pp_degrees = {1};
  s.sequence_parallel = {false};
  const planner::SearchResult r = planner::search(m, test::cluster_of("h100-ib-1024", 1), s);
  ASSERT_FALSE(r.best.empty());
  for (const planner::Candidate& c : r.best) EXPECT_EQ(c.plan.zero, 3);
}

// Llama 3 8B at 65,536 tokens a sample with the given attention core.
ModelSpec long_llama(costmodel::AttentionKernel k) {
  ModelSpec m = presets::load_model("llama3-8b");
  m.seq_length = 65536;
  m.attention_kernel = k;
  return m;
}

// Llama 3 8B on 16 GPUs at 65,536 tokens a sample: the search, offered cp 1, 2 and 4, runs the
// sequence over several ranks; without fused attention it refuses cp > 1.
TEST(PlannerSpace, SplitsLongSequencesOverContextParallelRanks) {
  planner::PlanSpace s;
  s.gpus = 16;
  s.global_batch = 8;
  s.schedules = {{"1f1b", 0}};
  s.cp_degrees = {1, 2, 4};
  const planner::SearchResult r = planner::search(long_llama(costmodel::AttentionKernel::Fused), test::cluster_of("h100-ib-1024", 2), s);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GT(r.best.front().plan.cp, 1);
  ModelSpec mat = long_llama(costmodel::AttentionKernel::Materialized);
  // Without it, cp > 1 is refused naming the degree and the flag (issue 52: it was dropped
  // silently, and `plan` reported "cp 2: no plan fits, 0 of 0").
  const std::string why = test::error_of([&] { planner::enumerate(s, mat, test::cluster_of("h100-ib-1024", 2)); });
  EXPECT_NE(why.find("cp_degrees = 2 is invalid (context parallelism needs the fused attention kernel: --attention-kernel fused"),
            std::string::npos)
      << why;
  s.cp_degrees = {1};
  for (const ParallelPlan& p : planner::enumerate(s, mat, test::cluster_of("h100-ib-1024", 2))) EXPECT_EQ(p.cp, 1);
}

// Experts: ep is a dimension (every power of two dividing the experts by default). Mixtral 8x7B
// on 64 H100s: the best plan splits its experts, each degree is reported, and a dense model is
// searched at ep 1 alone.
TEST(PlannerSpace, SplitsExpertsOverExpertParallelRanks) {
  planner::PlanSpace s;
  s.gpus = 64;
  s.global_batch = 256;
  s.schedules = {{"1f1b", 0}};
  s.tp_degrees = {1, 2};
  s.pp_degrees = {1, 2};
  s.microbatch_sizes = {1};
  s.recompute = {costmodel::RecomputePolicy::Full};
  const costmodel::ClusterSpec c = test::cluster_of("h100-ib-1024", 8);
  const planner::SearchResult r = planner::search(presets::load_model("mixtral-8x7b"), c, s);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GE(r.best.front().plan.ep, 4);
  int keys = 0;  // each degree tried is reported with its fastest plan (plan's "by choice" table)
  for (const planner::ChoiceBest& b : r.choices) keys += b.choice == "ep 1" || b.choice == "ep 8";
  EXPECT_EQ(keys, 2);
  for (const ParallelPlan& p : planner::enumerate(s, presets::load_model("llama3-8b"), c)) EXPECT_EQ(p.ep, 1);
}

// `plan --for-runtime` searches only what `stagecraft train` runs: the runtime's own rules
// (runtime/support/rules.h, the ones its preflight applies) filter the space, so no sequence
// parallelism, FSDP, te overlap or odd microbatches under a splitting overlap; FP8 is refused.
TEST(PlannerSpace, ForRuntimeKeepsWhatTheRuntimeRuns) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  PlanSpace s = small_space(32);
  s.gpus = 16;
  s.zero = {0, 1, 2, 3};
  s.sequence_parallel = {false, true};
  s.tp_overlap = {schedules::TpOverlap::Blocking, schedules::TpOverlap::Te, schedules::TpOverlap::Merak};
  s.microbatch_sizes = {1, 2};
  s.schedules = {{"1f1b", 0}, {"chimera", 0}};
  const std::vector<ParallelPlan> all = planner::enumerate(s, m, h100_nodes(2));
  s.for_runtime = true;
  const std::vector<ParallelPlan> runnable = planner::enumerate(s, m, h100_nodes(2));
  ASSERT_FALSE(runnable.empty());
  EXPECT_LT(runnable.size(), all.size());
  size_t expected = 0;
  for (const ParallelPlan& p : all) expected += runtime::runtime_runs(m, p) ? 1 : 0;
  EXPECT_EQ(runnable.size(), expected);
  bool zero_with_chimera = false, merak = false, zero3 = false, sp = false;
  for (const ParallelPlan& p : runnable) {
    if (p.sequence_parallel) {  // the runtime's sequence parallelism: blocking tp collectives only
      EXPECT_EQ(p.tp_overlap, schedules::TpOverlap::Blocking);
      sp = true;
    }
    if (p.zero == 3) {  // the runtime's FSDP gathers layers around blocking tp collectives only
      EXPECT_EQ(p.tp_overlap, schedules::TpOverlap::Blocking);
      zero3 = true;
    }
    EXPECT_NE(p.tp_overlap, schedules::TpOverlap::Te);
    if (p.tp_overlap == schedules::TpOverlap::Merak) {
      EXPECT_EQ(p.microbatch_size % 2, 0);
      merak = true;
    }
    zero_with_chimera = zero_with_chimera || (p.zero > 0 && p.schedule == "chimera");
    EXPECT_NO_THROW(runtime::check_runtime_plan(m, p));
  }
  EXPECT_TRUE(merak);
  EXPECT_TRUE(zero3);
  EXPECT_TRUE(sp);
  EXPECT_FALSE(zero_with_chimera);  // the schedule's rule: chains reduce copies jointly, no ZeRO
  s.fp8 = {false, true};
  EXPECT_NE(test::error_of([&] { planner::enumerate(s, m, h100_nodes(2)); }).find("precisions = fp8 is invalid"), std::string::npos);
}

}  // namespace stagecraft
