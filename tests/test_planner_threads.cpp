// The planner's speed-ups change nothing it answers (issue 53): on a small space, the plans
// kept, their order and the choices' bests are the same on 1, 2 or 4 threads, with branch and
// bound on or off and with the memory bound on or off; and the counts do not depend on threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "costmodel/memo.h"
#include "planner/bounds.h"
#include "presets/load.h"
#include "planner/search.h"
#include "planner/space.h"
#include "tests/helpers.h"

namespace stagecraft {
namespace {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using planner::PlanSpace;

ClusterSpec h100_nodes(int nodes) { return test::cluster_of("h100-nvl-ib-64", nodes); }

// Three zero stages and two precisions: choices the bound must keep exact.
PlanSpace small_space() {
  PlanSpace s;
  s.global_batch = 32;
  s.microbatch_sizes = {1, 2, 4};
  s.schedules = {{"1f1b", 0}, {"interleaved-1f1b", 2}, {"zb-h1", 0}};
  s.zero = {0, 1, 3};
  s.fp8 = {false, true};
  return s;
}

planner::SearchResult run(int threads, bool bound, bool prune) {
  planner::SearchOptions o;
  o.top_k = 8;
  o.threads = threads;
  o.bound = bound;
  o.prune = prune;
  return planner::search(presets::load_model("gpt3-7.5b"), h100_nodes(2), small_space(), o);
}

void expect_same_plans(const planner::SearchResult& a, const planner::SearchResult& b) {
  ASSERT_EQ(a.best.size(), b.best.size());
  for (size_t i = 0; i < a.best.size(); ++i) {
    EXPECT_EQ(costmodel::to_json(a.best[i].plan), costmodel::to_json(b.best[i].plan)) << "rank " << i;
    EXPECT_EQ(a.best[i].iteration_time_s, b.best[i].iteration_time_s) << "rank " << i;
    EXPECT_EQ(a.best[i].fp8, b.best[i].fp8) << "rank " << i;
    EXPECT_EQ(a.best[i].fit, b.best[i].fit) << "rank " << i;
  }
  ASSERT_EQ(a.choices.size(), b.choices.size());
  for (size_t i = 0; i < a.choices.size(); ++i) {
    ASSERT_EQ(a.choices[i].best.has_value(), b.choices[i].best.has_value()) << a.choices[i].choice;
    if (!a.choices[i].best) continue;
    EXPECT_EQ(costmodel::to_json(a.choices[i].best->plan), costmodel::to_json(b.choices[i].best->plan)) << a.choices[i].choice;
    EXPECT_EQ(a.choices[i].best->iteration_time_s, b.choices[i].best->iteration_time_s) << a.choices[i].choice;
  }
}

TEST(PlannerThreads, SamePlansSameOrderOnAnyNumberOfThreads) {
  const planner::SearchResult one = run(1, true, true);
  ASSERT_GE(one.best.size(), 8u);
  ASSERT_EQ(one.choices.size(), 5u);  // zero 0, 1, 3; bf16, fp8
  for (int threads : {2, 4}) {
    const planner::SearchResult many = run(threads, true, true);
    expect_same_plans(one, many);
    // The counts too: units and waves are fixed, not from the thread count.
    EXPECT_EQ(one.stats.evaluated, many.stats.evaluated);
    EXPECT_EQ(one.stats.bounded, many.stats.bounded);
    EXPECT_EQ(one.stats.schedules_compiled, many.stats.schedules_compiled);
    for (size_t i = 0; i < one.choices.size(); ++i) EXPECT_EQ(one.choices[i].fitting, many.choices[i].fitting);
  }
}

TEST(PlannerThreads, BranchAndBoundChangesNoPlan) {
  const planner::SearchResult with = run(2, true, true), without = run(2, false, true);
  expect_same_plans(with, without);
  EXPECT_EQ(without.stats.bounded, 0);
  EXPECT_LT(with.stats.evaluated, without.stats.evaluated);  // it cut something
  EXPECT_EQ(with.stats.considered + with.stats.balanced, with.stats.pruned + with.stats.bounded + with.stats.rejected +
                                                             with.stats.evaluated);
}

TEST(PlannerThreads, MemoryBoundChangesNoPlan) {
  const planner::SearchResult with = run(2, false, true), without = run(2, false, false);
  expect_same_plans(with, without);
  EXPECT_EQ(without.stats.pruned, 0);
  // Exactly the points whose memory lower bound exceeds the GPU's memory, at each precision.
  const ModelSpec m = presets::load_model("gpt3-7.5b");
  const ClusterSpec c = h100_nodes(2);
  const PlanSpace s = small_space();
  long over = 0;
  for (bool fp8 : s.fp8)
    for (costmodel::Fp8Recipe recipe : fp8 ? s.fp8_recipes : std::vector<costmodel::Fp8Recipe>{costmodel::Fp8Recipe::Delayed}) {
      ModelSpec at = m;
      at.fp8 = fp8;
      at.fp8_recipe = recipe;
      for (const costmodel::ParallelPlan& p : planner::enumerate(s, m, c)) over += planner::memory_lower_bound_bytes(at, p) > c.gpu_memory_bytes;
    }
  EXPECT_GT(over, 0);
  EXPECT_EQ(with.stats.pruned, over);
}

// The threads' shared caches build each value once: a second thread asking for a key being built
// waits for it instead of building its own (the evaluators a wave compiles are counted by keys).
TEST(PlannerThreads, SharedMemoBuildsEachKeyOnce) {
  costmodel::SharedMemo<int, int> memo;
  std::atomic<int> builds{0};
  auto slow_square = [&](int k) {
    return [&builds, k] {
      ++builds;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both threads arrive meanwhile
      return k * k;
    };
  };
  int a = 0, b = 0;
  std::thread t1([&] { a = memo.get(7, slow_square(7)); });
  std::thread t2([&] { b = memo.get(7, slow_square(7)); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, 49);
  EXPECT_EQ(b, 49);
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(memo.get(3, slow_square(3)), 9);
  EXPECT_EQ(builds.load(), 2);
  EXPECT_EQ(memo.size(), 2u);
  // A build that throws reaches its caller; the next request builds again.
  EXPECT_THROW(memo.get(5, []() -> int { throw InputError("no"); }), InputError);
  EXPECT_EQ(memo.get(5, slow_square(5)), 25);
}

TEST(PlannerThreads, RefusesNegativeThreads) {
  planner::SearchOptions o;
  o.threads = -1;
  EXPECT_THROW(planner::search(presets::load_model("gpt3-7.5b"), h100_nodes(2), small_space(), o), InputError);
}

}  // namespace
}  // namespace stagecraft
