// The workbench library (workbench/) without the CLI: a request resolved into a model, cluster
// and plan (dp's default and the microbatches by hand), bad fields refused naming their flag,
// --from's warnings collected, a GPU-count sweep's rows in the order asked, and the top plan of a
// search verified on the simulator against the evaluator.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "presets/load.h"
#include "helpers.h"
#include "schedules/error.h"
#include "workbench/compare.h"
#include "workbench/plan.h"
#include "workbench/resolve.h"
#include "workbench/route.h"
#include "workbench/search.h"
#include "workbench/space.h"
#include "workbench/sweep.h"
#include "workbench/verify.h"

namespace stagecraft {
namespace {

using test::error_of;

// gpt3-7.5b on h100-nvl-ib-64 (8 nodes of 8 GPUs: 64) with tp and pp given, dp left to default.
workbench::PlanRequest gpt_request(int tp, int pp) {
  workbench::PlanRequest r;
  r.model = "gpt3-7.5b";
  r.cluster = "h100-nvl-ib-64";
  r.tp = tp;
  r.pp = pp;
  return r;
}

// A small search: gpt-1.4b on hanayo-fc-a100-8 (one node of 8 A100s), 1F1B only, microbatch size
// 1, no recomputation, sharding or sp, global batch 16: each count's plans are few.
workbench::SearchRequest small_search() {
  workbench::SearchRequest q;
  q.model = "gpt-1.4b";
  q.cluster = "hanayo-fc-a100-8";
  q.global_batch = 16;
  q.schedules = "1f1b";
  q.microbatch_sizes = "1";
  q.recompute = "none";
  q.zero = "0";
  q.sequence_parallel = "off";
  q.tp = "1";
  return q;
}

}  // namespace

// dp = GPUs / (tp * pp) and 4 * pp microbatches when neither is given; the request's fields in
// the plan; the cluster as the preset names it.
TEST(Workbench, ResolvesARequestWithDpAndMicrobatchDefaults) {
  const workbench::Inputs in = workbench::resolve(gpt_request(2, 4));
  EXPECT_EQ(in.model.name, "gpt3-7.5b");
  EXPECT_FALSE(in.graph);
  EXPECT_EQ(in.cluster.name, "h100-nvl-ib-64");
  EXPECT_EQ(in.cluster.num_gpus(), 64);
  EXPECT_EQ(in.plan.tp, 2);
  EXPECT_EQ(in.plan.pp, 4);
  EXPECT_EQ(in.plan.dp, 64 / (2 * 4));
  EXPECT_EQ(in.plan.num_microbatches, 4 * 4);
  EXPECT_EQ(in.plan.microbatch_size, 1);
  EXPECT_EQ(in.plan.schedule, "1f1b");
  EXPECT_EQ(in.plan.num_gpus(), 64);
  EXPECT_EQ(in.profile_ptr(), nullptr);

  // Two nodes (16 GPUs), tp 2, pp 2, 8 microbatches of 2, zero 1, interleaved with 2 chunks.
  workbench::PlanRequest r = gpt_request(2, 2);
  r.nodes = 2;
  r.microbatches = 8;
  r.microbatch_size = 2;
  r.zero = 1;
  r.schedule = "interleaved-1f1b";
  r.chunks = 2;
  const workbench::Inputs two = workbench::resolve(r);
  EXPECT_EQ(two.cluster.num_gpus(), 16);
  EXPECT_EQ(two.plan.dp, 16 / (2 * 2));
  EXPECT_EQ(two.plan.num_microbatches, 8);
  EXPECT_EQ(two.plan.microbatch_size, 2);
  EXPECT_EQ(two.plan.zero, 1);
  EXPECT_EQ(two.plan.schedule, "interleaved-1f1b");
  EXPECT_EQ(two.plan.schedule_params.at("chunks"), 2);
  EXPECT_EQ(two.plan.global_batch(), 4L * 2 * 8);

  // cp 2 counts in dp's default: 64 / (tp 2 * pp 4 * cp 2) = 4 (cp needs fused attention).
  workbench::PlanRequest cp = gpt_request(2, 4);
  cp.cp = 2;
  cp.model_request.attention_kernel = "fused";
  const workbench::Inputs ring = workbench::resolve(cp);
  EXPECT_EQ(ring.plan.dp, 4);
  EXPECT_EQ(ring.model.attention_kernel, costmodel::AttentionKernel::Fused);
}

// The estimate of the resolved plan is the cost model's own for the same specs.
TEST(Workbench, EstimateRouteIsTheCostModelsForAPreset) {
  const workbench::Inputs in = workbench::resolve(gpt_request(2, 4));
  const costmodel::Estimate e = workbench::estimate_inputs(in, in.plan, {});
  const costmodel::Estimate direct = costmodel::estimate(presets::load_model("gpt3-7.5b"), presets::load_cluster("h100-nvl-ib-64"),
                                                         test::plan_of(8, 2, 4, 16));
  EXPECT_DOUBLE_EQ(e.eval.iteration_time_s, direct.eval.iteration_time_s);
  EXPECT_EQ(e.plan.dp, 8);
}

// Each bad field is an InputError naming its flag, the value and what is allowed.
TEST(Workbench, BadFieldsNameTheirFlag) {
  workbench::PlanRequest zero_tp = gpt_request(0, 4);
  EXPECT_EQ(error_of([&] { workbench::resolve(zero_tp); }), "--tp = 0 is invalid (tp must be at least 1)");
  EXPECT_EQ(error_of([&] { workbench::resolve(gpt_request(3, 4)); }),
            "--dp not given and tp*pp = 12 does not divide the 64 GPUs of cluster 'h100-nvl-ib-64'; give --dp");
  workbench::PlanRequest layers = gpt_request(2, 4);
  layers.stage_layers = "8,8,x,8";
  EXPECT_EQ(error_of([&] { workbench::resolve(layers); }),
            "--stage-layers entry 'x' is invalid (expected comma-separated integers, e.g. 10,11,11,10)");
  workbench::PlanRequest margin = gpt_request(2, 4);
  margin.memory_margin = 1.5;
  EXPECT_NE(error_of([&] { workbench::resolve(margin); }).find("--memory-margin"), std::string::npos);
  workbench::PlanRequest none = gpt_request(2, 4);
  none.model.clear();
  EXPECT_EQ(error_of([&] { workbench::resolve(none); }).rfind("--model is required", 0), 0u);
  EXPECT_EQ(error_of([] { workbench::grad_bucket_bytes_of(0); }), "--grad-bucket-mb = 0.000000 is invalid (must be greater than 0)");

  workbench::SearchRequest q = small_search();
  q.gpus = "4,x";
  EXPECT_EQ(error_of([&] { workbench::resolve_search(q); }), "--gpus = \"x\" is invalid (expected an integer)");
  q = small_search();
  q.precisions = "fp16";
  EXPECT_EQ(error_of([&] { workbench::space_of(q, 16, 8); }),
            "--precisions \"fp16\" is invalid (allowed: bf16, fp8, fp8-current, fp8-blockwise, fp8-mxfp8)");
  q = small_search();
  q.gpus = "2,4";
  q.out = "best.json";
  EXPECT_EQ(error_of([&] { workbench::resolve_search(q); }),
            "--out with several --gpus is invalid (one plan file per search: give one count)");
}

// --from's unknown fields reach the caller's warning function, not standard error.
TEST(Workbench, FromWarningsGoToTheCaller) {
  const std::string args = test::scratch_path("workbench-unknown.sh");
  {
    std::ofstream out(args);
    out << "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1024 "
           "--micro-batch-size 1 --global-batch-size 16 --frobnicate 3\n";
  }
  workbench::PlanRequest r;
  r.from = args;
  r.cluster = "hanayo-fc-a100-8";
  std::vector<std::string> warnings;
  const workbench::Inputs in = workbench::resolve(r, [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "--from " + args + ": unknown field --frobnicate (not understood; left out)");
  EXPECT_EQ(in.model.num_layers, 2);
  EXPECT_EQ(in.model.hidden_size, 64);
  // The file's world is left open: the cluster's 8 GPUs, dp 8, and 16 / (8 * 1) = 2 microbatches.
  EXPECT_EQ(in.plan.dp, 8);
  EXPECT_EQ(in.plan.num_microbatches, 2);
}

// compare's rows: schedules times modes, schedule-major, each plan with its schedule and mode and
// only the schedule parameters its generator reads.
TEST(Workbench, CompareRowsAreSchedulesTimesModes) {
  workbench::PlanRequest r = gpt_request(2, 4);
  r.params.waves = 2;  // hanayo's, not 1f1b's
  const workbench::Inputs in = workbench::resolve(r);
  const std::vector<workbench::CompareRow> rows = workbench::compare_rows("1f1b,hanayo", "blocking,merak", in.plan);
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::string> labels = {"1f1b.blocking", "1f1b.merak", "hanayo.blocking", "hanayo.merak"};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].label, labels[i]);
    EXPECT_EQ(rows[i].plan.schedule, rows[i].schedule);
    EXPECT_EQ(rows[i].plan.tp_overlap, rows[i].mode);
    EXPECT_EQ(rows[i].plan.dp, 8);
  }
  EXPECT_EQ(rows[1].mode, schedules::TpOverlap::Merak);
  EXPECT_FALSE(rows[0].plan.schedule_params.contains("waves"));
  EXPECT_EQ(rows[2].plan.schedule_params.at("waves"), 2);
  // One mode: the labels are the schedules' names.
  EXPECT_EQ(workbench::compare_rows("gpipe", "", in.plan).front().label, "gpipe");
  const workbench::Inputs one = workbench::resolve(gpt_request(1, 4));
  EXPECT_NE(error_of([&] { workbench::compare_rows("1f1b", "merak", one.plan); }).find("--tp-overlaps = 'merak' is invalid with tp = 1"),
            std::string::npos);
}

// --gpus: counts, doubling ranges and auto (the cluster and its halvings, whole nodes).
TEST(Workbench, GpuCountsReadAsWritten) {
  const costmodel::ClusterSpec c = test::cluster_of("h100-nvl-ib-64", 4);  // 4 nodes of 8
  EXPECT_EQ(workbench::gpu_counts("", c), std::vector<int>{});
  EXPECT_EQ(workbench::gpu_counts("16,8", c), (std::vector<int>{16, 8}));
  EXPECT_EQ(workbench::gpu_counts("8-40", c), (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(workbench::gpu_counts("auto", c), (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(error_of([&] { workbench::gpu_counts("16-8", c); }),
            "--gpus range '16-8' is invalid (LOW-HIGH with 1 <= LOW <= HIGH; doubles from LOW)");
}

// A sweep over 2, 4 and 8 GPUs with tp 1 and pp 1: one row per count in the order asked, each
// best plan pure data parallel over its count (dp = count, 16 / dp microbatches of 1), the time to
// train and GPU-hours from its rate, and the choice of count consistent with the rows.
TEST(Workbench, SweepsGpuCountsInOrder) {
  workbench::SearchRequest q = small_search();
  q.gpus = "2-8";
  q.pp = "1";
  q.tokens = 1e9;
  const workbench::SearchInputs in = workbench::resolve_search(q);
  ASSERT_EQ(in.counts, (std::vector<int>{2, 4, 8}));
  std::vector<int> progressed;
  const std::vector<workbench::SweepRow> rows = workbench::sweep(in, q, [&](int gpus) {
    progressed.push_back(gpus);
    return workbench::ProgressFn{};
  });
  EXPECT_EQ(progressed, (std::vector<int>{2, 4, 8}));
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const workbench::SweepRow& row = rows[i];
    EXPECT_EQ(row.gpus, in.counts[i]);
    ASSERT_TRUE(row.best) << row.gpus;
    const costmodel::ParallelPlan& p = row.best->plan;
    EXPECT_EQ(p.dp, row.gpus);
    EXPECT_EQ(p.tp * p.pp, 1);
    EXPECT_EQ(p.num_microbatches, 16 / row.gpus);
    EXPECT_EQ(p.schedule, "1f1b");
    // tokens per second: 16 sequences of 1,024 tokens per iteration.
    EXPECT_NEAR(row.best->tokens_per_s, 16.0 * 1024 / row.best->iteration_time_s, 1e-9 * row.best->tokens_per_s);
    EXPECT_NEAR(row.train_s, 1e9 / row.best->tokens_per_s, 1e-9 * row.train_s);
    EXPECT_NEAR(row.gpu_hours, row.gpus * row.train_s / 3600, 1e-9 * row.gpu_hours);
    EXPECT_NEAR(row.tokens_per_gpu_hour, row.best->tokens_per_s * 3600 / row.gpus, 1e-9 * row.tokens_per_gpu_hour);
  }
  // More GPUs, each with fewer microbatches of the same batch: faster iterations.
  EXPECT_LT(rows[1].best->iteration_time_s, rows[0].best->iteration_time_s);
  EXPECT_LT(rows[2].best->iteration_time_s, rows[1].best->iteration_time_s);
  const workbench::SweepChoice choice = workbench::sweep_choice(rows);
  EXPECT_EQ(choice.fastest_gpus, 8);
  EXPECT_DOUBLE_EQ(choice.tokens_per_s, rows[2].best->tokens_per_s);
  double most = 0;
  int cheapest = -1;
  for (const workbench::SweepRow& row : rows)
    if (row.tokens_per_gpu_hour > most) most = row.tokens_per_gpu_hour, cheapest = row.gpus;
  EXPECT_EQ(choice.cheapest_gpus, cheapest);
  EXPECT_DOUBLE_EQ(choice.tokens_per_gpu_hour, most);
}

// One search's top plan, on 4 GPUs as a pipeline of 4 (dp 1: no link shared by two transfers),
// on the simulator within 1% of the evaluator's time; --verify absent asks for nothing.
TEST(Workbench, VerifiesTheTopPlanOnTheSimulator) {
  if (!workbench::have_simulator()) GTEST_SKIP() << "built without the simulator";
  workbench::SearchRequest q = small_search();
  q.gpus = "4";
  q.pp = "4";
  q.top = 1;
  q.verify = "sim";
  const workbench::SearchInputs in = workbench::resolve_search(q);
  const planner::SearchResult r = workbench::search_plans(in, q);
  ASSERT_EQ(r.best.size(), 1u);
  const planner::Candidate& best = r.best.front();
  EXPECT_EQ(best.plan.pp, 4);
  EXPECT_EQ(best.plan.dp, 1);
  EXPECT_EQ(best.plan.num_microbatches, 16);
  const std::vector<double> simulated = workbench::verify_on_sim(q, in.model, r);
  ASSERT_EQ(simulated.size(), 1u);
  EXPECT_NEAR(simulated[0], best.iteration_time_s, 0.01 * best.iteration_time_s);
  q.verify.clear();
  EXPECT_TRUE(workbench::verify_on_sim(q, in.model, r).empty());
}

}  // namespace stagecraft
