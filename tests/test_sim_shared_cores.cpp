// Ranks that share a node's cores (ClusterSpec::cores_per_node; sim/platform.h): the simulator
// runs each rank's compute on one core of its node's shared host, so four pipeline ranks on two
// cores take longer than the evaluator's core-per-rank timeline, at least their compute over the
// cores, and agree with it where every rank has a core; the evaluator says it does not share.
#include <gtest/gtest.h>

#include <string>

#include "sim_helpers.h"

using namespace stagecraft;
using stagecraft::test::error_of;

namespace {

costmodel::Estimate tiny_pp4(int cores) {
  costmodel::ClusterSpec c = presets::load_cluster("local-cpu-4-on-2");
  c.cores_per_node = cores;
  return costmodel::estimate(presets::load_model("tiny"), c, test::plan_of(1, 1, 4, 8));
}

double busy_s(const costmodel::Estimate& e) {
  double sum = 0;
  for (double x : e.eval.compute_s) sum += x;
  return sum;
}

}  // namespace

TEST(SimSharedCores, FourRanksOnTwoCoresTakeLongerThanACoreEach) {
  const costmodel::Estimate e = tiny_pp4(2);
  const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp());
  EXPECT_GT(r.eval.iteration_time_s, 1.1 * e.eval.iteration_time_s);
  EXPECT_GE(r.eval.iteration_time_s, busy_s(e) / 2 * (1 - 1e-9));  // two cores do the four ranks' work
  EXPECT_LT(r.eval.iteration_time_s, 2 * e.eval.iteration_time_s);   // no rank waits for more than one other
  bool noted = false;
  for (const std::string& n : e.costs.notes) noted = noted || n.find("cores_per_node = 2") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(SimSharedCores, ACoreForEveryRankAgreesWithTheEvaluator) {
  for (int cores : {0, 4, 8}) {
    const costmodel::Estimate e = tiny_pp4(cores);
    const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp());
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s) << cores;
    EXPECT_TRUE(e.costs.notes.empty() || e.costs.notes.front().find("cores_per_node") == std::string::npos);
  }
}

TEST(SimSharedCores, RefusedWhereNotPriced) {
  costmodel::ClusterSpec c = presets::load_cluster("local-cpu-4-on-2");
  const costmodel::Estimate e = costmodel::estimate(presets::load_model("tiny"), c, test::plan_of(1, 2, 2, 8));
  EXPECT_NE(error_of([&] { sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp()); }).find("cores_per_node"),
            std::string::npos);
  c.cores_per_node = -1;
  EXPECT_NE(error_of([&] { costmodel::check(c); }).find("cores_per_node"), std::string::npos);
}
