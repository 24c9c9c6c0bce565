// Bucketed data-parallel reduction overlapped with the backward (PyTorch DDP; Megatron-LM
// --overlap-grad-reduce): the IR pass, its text form and validation, the evaluator's timing and
// the plan fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

using namespace stagecraft;
using namespace stagecraft::schedules;
using test::error_of;

namespace {
Schedule lowered_1f1b(int ranks, int mb) {
  GeneratorOptions o;
  o.ranks = ranks;
  o.microbatches = mb;
  return lower(generate("1f1b", o));
}

costmodel::ParallelPlan plan(int dp, int pp, int mb, bool overlap) {
  costmodel::ParallelPlan p = stagecraft::test::plan_of(dp, 1, pp, mb);
  p.overlap_grad_reduce = overlap;
  return p;
}

costmodel::ClusterSpec nodes_of_one(int n) {  // one H100 per node: every dp hop crosses a NIC
  costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = n;
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  return c;
}
}  // namespace

TEST(Buckets, PassSplitsTheReductionAfterTheBackward) {
  Schedule s = bucket_reductions(lowered_1f1b(2, 4), {4, 2});
  EXPECT_NO_THROW(validate(s));
  for (int r = 0; r < 2; ++r) {
    std::vector<Action> rg;
    for (const Action& a : s.actions[static_cast<size_t>(r)])
      if (a.op == Op::REDUCE_GRAD) rg.push_back(a);
    const int n = r == 0 ? 4 : 2;
    ASSERT_EQ(static_cast<int>(rg.size()), n);
    for (int j = 0; j < n; ++j) {
      EXPECT_DOUBLE_EQ(rg[static_cast<size_t>(j)].fraction, 1.0 / n);
      EXPECT_DOUBLE_EQ(rg[static_cast<size_t>(j)].early, static_cast<double>(n - 1 - j) / n);  // ready at (j+1)/n
    }
  }
  // One bucket: unchanged.
  EXPECT_EQ(bucket_reductions(lowered_1f1b(2, 4), {1, 1}).actions, lowered_1f1b(2, 4).actions);
  EXPECT_NE(error_of([] { bucket_reductions(lowered_1f1b(2, 4), {0, 1}); }).find("stage 0 = 0"), std::string::npos);
}

TEST(Buckets, TextFormAndValidation) {
  Action a = parse_action("0REDUCE_GRAD[frac=0.25,early=0.75]");
  EXPECT_DOUBLE_EQ(a.early, 0.75);
  EXPECT_EQ(to_text(a), "0REDUCE_GRAD[frac=0.25,early=0.75]");
  EXPECT_NE(error_of([] { parse_action("0REDUCE_GRAD[early=1]"); }).find("early must be a number in [0, 1)"), std::string::npos);
  // An early bucket must come right after a backward of its stage.
  Schedule s = lowered_1f1b(2, 2);
  auto& list = s.actions[0];
  Action early = Action::make(0, Op::REDUCE_GRAD);
  early.early = 0.5;
  early.fraction = 0.5;
  list.insert(list.begin(), early);
  for (Action& x : list)
    if (x.op == Op::REDUCE_GRAD && x.early == 0) x.fraction = 0.5;
  EXPECT_NE(error_of([&] { validate(s); }).find("an early REDUCE_GRAD must follow a backward"), std::string::npos);
}

// One stage, one microbatch: buckets issued at (j+1)/n of the backward, run one after another
// on the collective stream, each a + (T - a)/n (the whole latency a per bucket). The tail after
// the backward is what the last buckets leave exposed.
TEST(Buckets, EvaluatorIssuesEachBucketWhenItsGradientsAreReady) {
  const costmodel::ModelSpec m = presets::load_model("gpt3-7.5b");
  costmodel::ParallelPlan p = plan(4, 1, 1, true);
  p.grad_bucket_bytes = 400e6;
  costmodel::Estimate e = costmodel::estimate(m, nodes_of_one(4), p);
  const costmodel::StageCost& sc = e.costs.stages[0];
  const int n = static_cast<int>(std::ceil(sc.grad_bytes / p.grad_bucket_bytes));
  ASSERT_GT(n, 4);
  EXPECT_EQ(costmodel::grad_buckets(e.costs, p), std::vector<int>{n});
  const double a = sc.reduce_grad_latency_s, T = sc.reduce_grad_s, bucket = a + (T - a) / n;
  // By hand (comm.h): a flat ring over 4 NICs, 2(n-1) = 6 hops of 5 us and 2(n-1)/n S over
  // 50 GB/s x 0.94; for a buffer of GBs it beats the tree's 2 S / B.
  ASSERT_NEAR(a, 6 * 5e-6, 1e-15);
  EXPECT_NEAR(T, 6 * 5e-6 + 1.5 * sc.grad_bytes / (50e9 * 0.94), 1e-9 * T);
  double free_at = 0;
  for (int j = 0; j < n; ++j) free_at = std::max(free_at, sc.f_s + (j + 1.0) / n * sc.b_s) + bucket;
  const double expect = free_at + e.costs.optimizer_s[0];
  EXPECT_NEAR(e.eval.iteration_time_s, expect, 1e-9 * expect);
  // Against one reduction after the backward: faster, and the buckets' comm busy time is n
  // latencies more than the single all-reduce's.
  costmodel::Estimate whole = costmodel::estimate(m, nodes_of_one(4), plan(4, 1, 1, false));
  EXPECT_LT(e.eval.iteration_time_s, whole.eval.iteration_time_s);
  EXPECT_NEAR(e.eval.dp_comm_s[0], whole.eval.dp_comm_s[0] + (n - 1) * a, 1e-9);
  EXPECT_LT(e.eval.exposed_dp_comm_s[0], whole.eval.exposed_dp_comm_s[0]);
}

// Only the last backward of a stage carries buckets; the pipeline and memory are unchanged.
TEST(Buckets, PipelineKeepsItsShapeAndMemory) {
  const costmodel::ModelSpec m = presets::load_model("gpt3-7.5b");
  costmodel::Estimate on = costmodel::estimate(m, nodes_of_one(8), plan(4, 2, 8, true));
  costmodel::Estimate off = costmodel::estimate(m, nodes_of_one(8), plan(4, 2, 8, false));
  EXPECT_EQ(on.eval.peak_memory_bytes, off.eval.peak_memory_bytes);
  EXPECT_EQ(on.eval.compute_s, off.eval.compute_s);
  EXPECT_LE(on.eval.iteration_time_s, off.eval.iteration_time_s);
}

TEST(Buckets, PlanFieldsAndCli) {
  costmodel::ParallelPlan p = plan(4, 2, 8, true);
  p.grad_bucket_bytes = 1e6;
  costmodel::ParallelPlan q = costmodel::plan_from_json(costmodel::to_json(p));
  EXPECT_TRUE(q.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(q.grad_bucket_bytes, 1e6);
  nlohmann::json j = costmodel::to_json(p);
  j["grad_bucket_bytes"] = 0;
  EXPECT_NE(error_of([&] { costmodel::plan_from_json(j); }).find("plan.grad_bucket_bytes = 0"), std::string::npos);
  const std::string bin = STAGECRAFT_BIN;
  const std::string common = " estimate --model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 8 --pp 2 --microbatches 4 --overlap-grad-reduce";
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --grad-bucket-mb 50 > /dev/null").c_str())), 0);
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --grad-bucket-mb 0 > /dev/null 2>&1").c_str())), 2);
}

// Without bucketed overlap, where each stage's reduction starts: Megatron-LM's rank end (after
// the whole backward) exposes it all; eager per-stage reduction (stage-end) hides the reductions
// of the stages that finish early behind the rank's remaining backwards.
TEST(Buckets, ReductionAtTheRanksEndExposesWhatEagerReductionHides) {
  costmodel::ParallelPlan p = plan(8, 2, 8, false);
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 2;
  const auto m = presets::load_model("gpt3-7.5b");
  const auto c = nodes_of_one(16);
  p.grad_reduce_at = GradReduceAt::Auto;  // interleaved-1f1b is Megatron-LM's: the rank's end
  const auto automatic = costmodel::estimate(m, c, p);
  p.grad_reduce_at = GradReduceAt::RankEnd;
  const auto rank_end = costmodel::estimate(m, c, p);
  p.grad_reduce_at = GradReduceAt::StageEnd;
  const auto eager = costmodel::estimate(m, c, p);
  EXPECT_DOUBLE_EQ(automatic.eval.iteration_time_s, rank_end.eval.iteration_time_s);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_NEAR(rank_end.eval.exposed_dp_comm_s[r], rank_end.eval.dp_comm_s[r], 1e-9) << r;
    EXPECT_LT(eager.eval.exposed_dp_comm_s[r], 0.9 * rank_end.eval.exposed_dp_comm_s[r]) << r;
  }
  EXPECT_LT(eager.eval.iteration_time_s, rank_end.eval.iteration_time_s);
  EXPECT_EQ(costmodel::plan_from_json(costmodel::to_json(p)).grad_reduce_at, GradReduceAt::StageEnd);
  const std::string bin = STAGECRAFT_BIN;
  const std::string common = " estimate --model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 8 --pp 2 --microbatches 4";
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --grad-reduce-at stage-end > /dev/null").c_str())), 0);
  EXPECT_EQ(WEXITSTATUS(std::system((bin + common + " --grad-reduce-at later > /dev/null 2>&1").c_str())), 2);
}
