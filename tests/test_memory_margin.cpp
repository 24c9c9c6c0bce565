// Fit with a margin (issue 17): a plan fits when every rank's peak leaves the cluster's
// memory_margin of GPU memory free; estimate reports the headroom per rank, the planner refuses
// plans inside the margin, and the CLI takes --memory-margin.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "helpers.h"
#include "planner/search.h"
#include "schedules/error.h"

namespace stagecraft {
namespace {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

ParallelPlan gpt_plan() {
  ParallelPlan p = test::plan_of(4, 2, 2, 8);
  p.schedule = "1f1b";
  return p;
}

TEST(MemoryMargin, DefaultCitedAndRangeChecked) {
  ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  EXPECT_DOUBLE_EQ(c.memory_margin, 0.15);
  EXPECT_DOUBLE_EQ(c.usable_memory_bytes(), 0.85 * c.gpu_memory_bytes);
  nlohmann::json j = costmodel::to_json(c);
  EXPECT_DOUBLE_EQ(costmodel::cluster_from_json(j).memory_margin, 0.15);
  j["memory_margin"] = 0.3;
  EXPECT_DOUBLE_EQ(costmodel::cluster_from_json(j).memory_margin, 0.3);
  for (double bad : {1.0, -0.1}) {
    j["memory_margin"] = bad;
    try {
      costmodel::cluster_from_json(j);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("memory_margin"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[0, 1)"), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryMargin, HeadroomPerRankIsUsableLessPeak) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  const ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  const costmodel::Estimate e = costmodel::estimate(m, c, gpt_plan());
  ASSERT_EQ(e.headroom_bytes.size(), e.eval.peak_memory_bytes.size());
  EXPECT_DOUBLE_EQ(e.usable_memory_bytes, 0.85 * c.gpu_memory_bytes);
  for (size_t r = 0; r < e.headroom_bytes.size(); ++r)
    EXPECT_DOUBLE_EQ(e.headroom_bytes[r], e.usable_memory_bytes - e.eval.peak_memory_bytes[r]);
  EXPECT_EQ(e.fits, *std::min_element(e.headroom_bytes.begin(), e.headroom_bytes.end()) >= 0);
  const nlohmann::json j = costmodel::to_json(e);
  EXPECT_EQ(j["headroom_bytes"].size(), e.headroom_bytes.size());
  EXPECT_DOUBLE_EQ(j["memory_margin"].get<double>(), 0.15);
}

// A GPU of 1.1 peaks: the plan fits with a 5% margin and not with 15%, the peaks unchanged.
TEST(MemoryMargin, TheMarginDecidesTheFit) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  const double peak = costmodel::estimate(m, c, gpt_plan()).max_memory_bytes;
  c.gpu_memory_bytes = 1.1 * peak;
  c.memory_margin = 0.05;
  const costmodel::Estimate loose = costmodel::estimate(m, c, gpt_plan());
  EXPECT_TRUE(loose.fits);
  c.memory_margin = 0.15;
  const costmodel::Estimate tight = costmodel::estimate(m, c, gpt_plan());
  EXPECT_FALSE(tight.fits);
  EXPECT_DOUBLE_EQ(tight.max_memory_bytes, loose.max_memory_bytes);
  EXPECT_LT(*std::min_element(tight.headroom_bytes.begin(), tight.headroom_bytes.end()), 0);
}

// The planner's best plan without a margin uses more than a tight margin allows; with that
// margin the planner refuses it, and every plan it keeps leaves the margin free.
// Plans inside the margin (over the usable memory, within the GPU's) are kept, marked tight and
// ranked after the plans that fit; every other kept plan leaves the margin free.
TEST(MemoryMargin, PlannerMarksPlansInsideTheMarginTight) {
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = 1;
  planner::PlanSpace s;
  s.global_batch = 16;
  s.microbatch_sizes = {1, 2};
  s.schedules = {{"1f1b", 0}, {"gpipe", 0}};
  c.memory_margin = 0;
  const planner::SearchResult free_run = planner::search(m, c, s);
  ASSERT_FALSE(free_run.best.empty());
  const double first = free_run.best.front().max_memory_bytes;
  c.memory_margin = 1 - 0.99 * first / c.gpu_memory_bytes;  // the unconstrained best no longer fits
  planner::SearchOptions every;
  every.top_k = 100000;  // every plan kept: the tight ones come after all that fit
  const planner::SearchResult tight = planner::search(m, c, s, every);
  ASSERT_FALSE(tight.best.empty());
  int marked = 0;
  for (const planner::Candidate& k : tight.best) {
    EXPECT_LE(k.max_memory_bytes, c.gpu_memory_bytes);
    EXPECT_EQ(k.fit, k.max_memory_bytes <= c.usable_memory_bytes() ? costmodel::Fit::Fits : costmodel::Fit::Tight);
    EXPECT_DOUBLE_EQ(k.headroom_bytes, c.usable_memory_bytes() - k.max_memory_bytes);
    marked += k.fit == costmodel::Fit::Tight;
  }
  // The unconstrained best is still found, now marked tight, and ranked after every plan that
  // fits (issue 52: a tight plan is never ranked above one that fits).
  bool found = false, seen_tight = false;
  for (const planner::Candidate& k : tight.best) {
    if (k.fit == costmodel::Fit::Fits) EXPECT_FALSE(seen_tight) << "a plan that fits ranked after a tight one";
    seen_tight = seen_tight || k.fit == costmodel::Fit::Tight;
    if (costmodel::to_json(k.plan) != costmodel::to_json(free_run.best.front().plan)) continue;
    found = true;
    EXPECT_EQ(k.fit, costmodel::Fit::Tight);
  }
  EXPECT_TRUE(found);
  EXPECT_GE(marked, 1);
}

TEST(MemoryMargin, CliFlagAndHeadroomLines) {
  const std::string cfg = "--model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 2 --pp 2 --microbatches 8";
  auto r = test::run_cli("estimate " + cfg + " --memory-margin 0.2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("less a margin of 20%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("headroom"), std::string::npos) << r.out;
  r = test::run_cli("estimate " + cfg + " --memory-margin 0.2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.out)["memory_margin"].get<double>(), 0.2);
  r = test::run_cli("estimate " + cfg + " --memory-margin 1.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--memory-margin: '1.5' is invalid (allowed: a number from 0 to 0.99)"), std::string::npos) << r.err;
  r = test::run_cli("compare " + cfg + " --schedules 1f1b,gpipe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("headroom"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace stagecraft
