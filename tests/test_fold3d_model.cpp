// FOLD3D's performance model (Sec. III-C, eqs. (1)-(7)) and segment rule (Sec. IV): the closed
// forms on hand numbers, the paper's own claims, and the cross-check against the evaluator on
// the settings of FOLD3D's Table II.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/fold3d_model.h"
#include "presets/load.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

TEST(Fold3dModel, EquationsOnHandNumbers) {
  // comp 10 s, tp 1 s, pp 2 s, dp 8 s; p = 4, ns = 4, ms = 8.
  EXPECT_DOUBLE_EQ(fold3d::bubble_s(10, 4, 4, 8), 3 * 10.0 / 32);                    // eq. (3)
  EXPECT_DOUBLE_EQ(fold3d::overlappable_comm_s(2, 8, 4, 8), 7.0 / 8 * 2 + 3.0 / 4 * 8);  // eq. (4)
  EXPECT_DOUBLE_EQ(fold3d::exposed_comm_s(2, 8, 1, 4, 8), 2.0 / 8 + 8.0 / 4 + 1);     // eq. (5)
  EXPECT_DOUBLE_EQ(fold3d::iteration_s(10, 1, 2, 8, 4, 4, 8), 10 + 3.25 + 3 * 10.0 / 32);  // eq. (2): X = 7.75 hides
  EXPECT_DOUBLE_EQ(fold3d::iteration_s(5, 1, 2, 8, 4, 4, 8), 7.75 + 3.25 + 3 * 5.0 / 32);  // X outlasts comp 5
  EXPECT_DOUBLE_EQ(fold3d::conventional_iteration_s(10, 1, 2, 8, 4, 8), 10 + 11 + 3 * 10.0 / 8);  // eq. (1)
  EXPECT_DOUBLE_EQ(fold3d::dp_comm_s(16e9, 4, 100e9), 2 * 3 * 16e9 / (4 * 100e9));
  EXPECT_DOUBLE_EQ(fold3d::pp_comm_s(64, 8e6, 2, 100e9), 64 * 8e6 / (2 * 100e9));
  EXPECT_DOUBLE_EQ(fold3d::megatron_checkpoints(4, 2), 11);  // eq. (6)
  EXPECT_DOUBLE_EQ(fold3d::aiao_checkpoints(16, 2), 32);     // eq. (7)
}

// "In our performance modeling, the DP.sync time will be reduced by 75% when the segment number
// is 4" (Sec. VI-A, beside Fig. 5): eq. (5) leaves T_dp / ns on the critical path.
TEST(Fold3dModel, FourSegmentsLeaveAQuarterOfTheReduction) {
  const double dp = 2.0;
  EXPECT_DOUBLE_EQ(fold3d::exposed_comm_s(0, dp, 0, 4, 8) / dp, 0.25);
}

namespace {

struct PaperSetting {
  const char* cluster;
  const char* model;
  int dp, pp, tp, microbatches;
};

// FOLD3D Table II: (DP, PP, TP), 4 segments, micro-batch size 4 (Sec. VI: "the micro-batch size
// used in our experiments was 4"), batch 256 on the A100s and 128 on the V100s.
const PaperSetting kTableII[] = {
    {"fold3d-a100-128", "gpt3-18b", 8, 2, 8, 8},
    {"fold3d-a100-128", "gpt3-39b", 4, 4, 8, 16},
    {"fold3d-v100-64", "gpt3-18b", 4, 2, 8, 8},
    {"fold3d-v100-64", "gpt3-39b", 2, 4, 8, 16},
};

ParallelPlan plan_of(const PaperSetting& s, const char* schedule) {
  ParallelPlan p;
  p.dp = s.dp;
  p.pp = s.pp;
  p.tp = s.tp;
  p.microbatch_size = 4;
  p.num_microbatches = s.microbatches;
  p.sequence_parallel = true;
  p.schedule = schedule;
  return p;
}

}  // namespace

// The closed forms against the evaluator on FOLD3D's own settings. Eq. (1) prices the plan run
// as 1F1B (full recomputation, sequence parallelism, as Megatron-SP) within 5% of the evaluator;
// eq. (2) prices AIAO (4 segments, offload off: the paper's model has no host transfers) at most
// 10% under the evaluator, which also counts each transfer's latency, the reduction split across
// iterations and the first segment's reduction waiting for the step (the paper: measured "less
// than 5% larger than the performance modeling"). Both engines rank AIAO ahead of 1F1B, as
// Table II measures, and the evaluator's search picks more than one segment, for GPT-3 39B
// (Fig. 11's model) 2 to 4, the range Sec. VI-A4 finds best.
TEST(Fold3dModel, AgreesWithTheEvaluatorOnTableII) {
  for (const PaperSetting& s : kTableII) {
    SCOPED_TRACE(std::string(s.cluster) + " " + s.model);
    const ModelSpec m = load_model(s.model);
    const ClusterSpec c = load_cluster(s.cluster);
    ParallelPlan p = plan_of(s, "fold3d-aiao");
    p.schedule_params["segments"] = 4;
    p.schedule_params["offload"] = false;
    const Estimate aiao = estimate(m, c, p);
    const fold3d::Model f = fold3d::model_of(aiao);
    EXPECT_EQ(f.ns, 4);
    const double closed_aiao_s = f.iteration_s + f.optimizer_s;
    EXPECT_GE(aiao.eval.iteration_time_s, closed_aiao_s);
    EXPECT_LE(aiao.eval.iteration_time_s, 1.10 * closed_aiao_s);
    ParallelPlan q = plan_of(s, "1f1b");
    q.recompute = RecomputePolicy::Full;
    const Estimate one = estimate(m, c, q);
    EXPECT_NEAR(one.eval.iteration_time_s / (f.megatron_iteration_s + f.optimizer_s), 1.0, 0.05);
    EXPECT_LT(f.iteration_s, f.megatron_iteration_s);
    ParallelPlan a = plan_of(s, "fold3d-aiao");  // every checkpoint offloaded as FOLD3D runs, segments searched
    a.schedule_params["offload"] = true;
    const Estimate searched = estimate(m, c, a);
    EXPECT_LT(searched.eval.iteration_time_s, one.eval.iteration_time_s);
    const int ns = searched.plan.schedule_params["segments"].get<int>();
    EXPECT_GE(ns, 2);
    if (std::string(s.model) == "gpt3-39b") {
      EXPECT_LE(ns, 4);  // the model of Fig. 11
    }
    // Offload decided by memory: these plans fit without it, so nothing moves and nothing is lost.
    const Estimate decided = estimate(m, c, plan_of(s, "fold3d-aiao"));
    EXPECT_EQ(decided.plan.schedule_params["offload_segments"], 0);
    EXPECT_TRUE(decided.fits);
    EXPECT_LE(decided.eval.iteration_time_s, searched.eval.iteration_time_s);
  }
}

// Where memory is short, the fewest segments offload, from the first: GPT-3 39B on the V100s
// with a 20% margin (25.6 GiB usable) fits with two of four segments offloaded, not with one.
TEST(Fold3dModel, OffloadsOnlyTheSegmentsMemoryNeeds) {
  const PaperSetting& s = kTableII[3];
  const ModelSpec m = load_model(s.model);
  ClusterSpec c = load_cluster(s.cluster);
  c.memory_margin = 0.2;
  ParallelPlan p = plan_of(s, "fold3d-aiao");
  p.schedule_params["segments"] = 4;
  const Estimate e = estimate(m, c, p);
  const int k = e.plan.schedule_params["offload_segments"].get<int>();
  EXPECT_GT(k, 0);
  EXPECT_LT(k, 4);
  EXPECT_TRUE(e.fits);
  ParallelPlan fewer = e.plan;
  fewer.schedule_params["offload_segments"] = k - 1;
  fewer.schedule_params["offload"] = k - 1 > 0;
  EXPECT_FALSE(estimate(m, c, fewer).fits);
  ParallelPlan all = e.plan;
  all.schedule_params["offload_segments"] = 4;
  EXPECT_LE(e.eval.iteration_time_s, estimate(m, c, all).eval.iteration_time_s);
  // Rank 0's OFFLOADs (the first k segments' stages) each move a stage's checkpoints: the layers'
  // inputs, (b, s, h) / t at 16 bits with sp, 4 x 2048 x 8192 x 2 / 8 = 16 MiB a layer, and on
  // stage 0 the embedding's dropout mask at one byte (memory.h). Every forward comes before the
  // first backward and the copy stream runs in list order: at the peak all are on the host.
  double offloaded_bytes = 0;
  int offloads = 0;
  for (const stagecraft::schedules::Action& a : e.schedule.actions[0])
    if (a.op == stagecraft::schedules::Op::OFFLOAD) {
      ++offloads;
      offloaded_bytes += e.costs.stages[static_cast<size_t>(a.stage)].layers * 4.0 * 2048 * 8192 * 2 / 8 +
                         (a.stage == 0 ? 4.0 * 2048 * 8192 / 8 : 0);
    }
  EXPECT_EQ(offloads, k * 16);  // one stage a segment on rank 0, 16 microbatches
  EXPECT_NEAR(e.eval.peak_host_bytes[0], offloaded_bytes, 1e-9 * offloaded_bytes);
  // Segments searched with offload_segments given: the search starts where K segments exist.
  ParallelPlan given = plan_of(s, "fold3d-aiao");
  given.schedule_params["offload_segments"] = 3;
  const Estimate g = estimate(m, c, given);
  EXPECT_GE(g.plan.schedule_params["segments"].get<int>(), 3);
  EXPECT_EQ(g.plan.schedule_params["offload_segments"], 3);
}

// Sec. IV's rule: ns grows while the overlappable communication X (eq. (4)) stays within T^comp.
// With T^comp 10.2 s, T_dp 12 s and free transfers X(ns) = 12 (ns-1)/ns: 10 s at 6, 10.29 s at 7.
TEST(Fold3dModel, PaperSegmentRule) {
  fold3d::Model m;
  m.ms = 8;
  m.comp_s = 10.2;
  m.dp_comm_s = 12;
  m.message_bytes = 0;
  m.d_inter = 2;
  m.host_Bps = 1e11;
  EXPECT_EQ(fold3d::paper_segments(m, 16), 6);
  EXPECT_EQ(fold3d::paper_segments(m, 4), 4);
  // Transfers count too: 2 ms ns of 1 GB each over 2 hosts at 100 GB/s, T_pp = 0.08 ns s;
  // X(5) = 7/8 0.4 + 9.6 = 9.95 s, X(6) = 7/8 0.48 + 10 = 10.42 s.
  m.message_bytes = 1e9;
  EXPECT_EQ(fold3d::paper_segments(m, 16), 5);
}

// `estimate` shows the closed forms beside the evaluated iteration for fold3d-aiao plans only.
TEST(Fold3dModel, EstimateShowsIt) {
  const std::string plan = "--model gpt3-18b --cluster fold3d-v100-64 --dp 4 --pp 2 --tp 8 --microbatch-size 4 "
                           "--microbatches 8 --sequence-parallel";
  auto r = stagecraft::test::run_cli("estimate " + plan + " --schedule fold3d --segments 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["fold3d_model"];
  EXPECT_EQ(j["segments"], 4);
  EXPECT_EQ(j["d_inter"], 4);  // tp 8 fills a node: the 4 replicas sit on 4 hosts
  EXPECT_LT(j["iteration_s"].get<double>(), j["megatron_iteration_s"].get<double>());
  EXPECT_GE(j["paper_segments"].get<int>(), 1);
  r = stagecraft::test::run_cli("estimate " + plan + " --schedule fold3d --segments 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("eq. (2), AIAO"), std::string::npos) << r.out;
  r = stagecraft::test::run_cli("estimate " + plan + " --schedule 1f1b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("fold3d_model"));
}
