// Megatron-Core's ways of splitting the layers over the pipeline stages (costmodel/
// pipeline_split.h): layout strings as its parser reads them, the embedding and loss counted as
// layers, the layout written back, refusals that name the field, and the split reaching the
// workload (zero-layer end stages, multi-token prediction on a stage of its own) and the
// simulator.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "costmodel/pipeline_split.h"
#include "costmodel/plan_workload.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "helpers.h"
#include "sim_helpers.h"

namespace stagecraft {
namespace {

using costmodel::ModelSpec;
using test::error_of;

ModelSpec with_layers(int layers, int mtp) {
  ModelSpec m = presets::load_model("tiny");
  m.num_layers = layers;
  m.mtp_layers = mtp;
  return m;
}

std::vector<int> repeated(std::vector<int> head, int value, int times, std::vector<int> tail) {
  head.insert(head.end(), static_cast<size_t>(times), value);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// DeepSeek-V3's 61 layers and one MTP module. Megatron-Bridge's recipe layout for pp 16 (and
// pp 4 x vp 4, pp 8 x vp 2): "Et*4|(t*4|)*14tmL", four layers a stage, the last one layer with
// the module and the loss (recipes/deepseek/deepseek_v3.py, v0.4.2).
TEST(PipelineSplit, RecipeLayoutOfDeepSeekV3) {
  const costmodel::LayoutSplit s = costmodel::parse_layout("Et*4|(t*4|)*14tmL", with_layers(61, 1), 16);
  EXPECT_EQ(s.layers, repeated({}, 4, 15, {1}));
  EXPECT_EQ(s.mtp_stage, 15);
}

// The H100 layout of pp 8 x vp 4 (arXiv 2603.07685's DeepSeek-V3 run): the module on a stage of
// its own (rank 6's last chunk) and the loss alone on the last. Commas are cosmetic, as in
// Megatron-Core's own example "Ettt|(tt|)*29,m|L".
TEST(PipelineSplit, ModuleOnAStageOfItsOwn) {
  const costmodel::LayoutSplit s = costmodel::parse_layout("Ettt|(tt|)*29,m|L", with_layers(61, 1), 32);
  EXPECT_EQ(s.layers, repeated({3}, 2, 29, {0, 0}));
  EXPECT_EQ(s.mtp_stage, 30);
}

// Megatron-Core's get_num_layers_to_build: (layers + 2) / stages each, one less on the first and
// the last. Llama 3.1 405B's 126 layers on 128 virtual stages (pp 16 x vp 8): the embedding alone,
// 126 stages of one, the loss alone; on 64 (pp 16 x vp 4): 1, 62 x 2, 1. Qwen3-235B's 94 on 24.
TEST(PipelineSplit, EmbeddingAndLossCountedAsLayers) {
  EXPECT_EQ(costmodel::accounted_stage_layers(with_layers(126, 0), 128, true, true), repeated({0}, 1, 126, {0}));
  EXPECT_EQ(costmodel::accounted_stage_layers(with_layers(126, 0), 64, true, true), repeated({1}, 2, 62, {1}));
  EXPECT_EQ(costmodel::accounted_stage_layers(with_layers(94, 0), 24, true, true), repeated({3}, 4, 22, {3}));
  EXPECT_EQ(costmodel::accounted_stage_layers(with_layers(127, 0), 64, true, false), repeated({1}, 2, 63, {}));
  const std::string e = error_of([] { costmodel::accounted_stage_layers(with_layers(126, 0), 48, true, true); });
  EXPECT_NE(e.find("plan.account_for_embedding_in_pipeline_split and plan.account_for_loss_in_pipeline_split"), std::string::npos) << e;
  EXPECT_NE(e.find("128 with the embedding and loss counted, not a multiple of the schedule's 48 stages"), std::string::npos) << e;
}

// Megatron-Core's uneven first and last ranks: 34 layers on pp 4 x vp 2 with 6 on the first rank
// and 4 on the last: the middle ranks hold (34 - 6 - 4) / 2 = 12, each rank's split over its two
// chunks (3, 6, 6, 2 per chunk, in virtual-stage order). DeepSeek-V3's 61 layers on pp 16 with 4
// first and 1 last: 56 / 14 = 4 each, the recipe's layout without its E, m and L.
TEST(PipelineSplit, UnevenFirstAndLastRanks) {
  EXPECT_EQ(costmodel::uneven_stage_layers(with_layers(34, 0), 4, 2, 6, 4), (std::vector<int>{3, 6, 6, 2, 3, 6, 6, 2}));
  EXPECT_EQ(costmodel::uneven_stage_layers(with_layers(61, 0), 16, 1, 4, 1), repeated({4}, 4, 14, {1}));
  EXPECT_EQ(costmodel::uneven_stage_layers(with_layers(32, 0), 4, 1, -1, 2), (std::vector<int>{10, 10, 10, 2}));
  const std::string odd = error_of([] { costmodel::uneven_stage_layers(with_layers(32, 0), 4, 2, 6, 4); });
  EXPECT_NE(odd.find("pipeline rank 1 holds 11 layers, not a multiple of its 2 virtual stages"), std::string::npos) << odd;
  const std::string rest = error_of([] { costmodel::uneven_stage_layers(with_layers(32, 0), 4, 1, 5, 4); });
  EXPECT_NE(rest.find("the other 2 pipeline ranks get 23"), std::string::npos) << rest;
}

// What --emit megatron writes: the recipe's own string back, and any split read back unchanged.
TEST(PipelineSplit, LayoutWrittenBack) {
  EXPECT_EQ(costmodel::layout_of(repeated({}, 4, 15, {1}), 1), "Et*4|(t*4|)*14tmL");
  EXPECT_EQ(costmodel::layout_of({5}, 0), "Et*5L");
  EXPECT_EQ(costmodel::layout_of({3, 1}, 2), "Et*3|tm*2L");
  const std::vector<int> split = repeated({0}, 1, 126, {0});
  const std::string text = costmodel::layout_of(split, 0);
  EXPECT_EQ(text, "E|(t|)*126L");
  EXPECT_EQ(costmodel::parse_layout(text, with_layers(126, 0), 128).layers, split);
}

TEST(PipelineSplit, BadLayoutsNameTheFieldAndWhy) {
  struct Case {
    std::string text;
    int stages;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"Et*4|t*4L", 4, "it has 2 stages; the schedule has 4 per pipeline (pp x chunks)"},
      {"Et*4|x|t*4L", 3, "the character 'x'"},
      {"E((t|)*2)*2L", 2, "nested parentheses"},
      {"t*8|L", 2, "it must begin with the embedding E and end with the loss L"},
      {"Et*4||t*4L", 3, "stage 1 holds no layer"},
      {"Et*2|t*2L", 2, "it has 4 transformer layers; model 'tiny' has 8"},
      {"Et*4|(t*2|)*", 2, "'*' must be followed by a count"},
      {"Et*4|t*4mL", 2, "it has 1 multi-token prediction layers; model 'tiny' has 0 (mtp_layers)"},
  };
  for (const Case& k : cases) {
    const std::string e = error_of([&] { costmodel::parse_layout(k.text, with_layers(8, 0), k.stages); });
    EXPECT_NE(e.find("plan.pipeline_layout = '" + k.text + "' is invalid: "), std::string::npos) << e;
    EXPECT_NE(e.find(k.why), std::string::npos) << k.text << ": " << e;
  }
  const std::string after = error_of([] { costmodel::parse_layout("Et*4|mtL", with_layers(5, 1), 2); });
  EXPECT_NE(after.find("transformer layers come before the multi-token prediction layers"), std::string::npos) << after;
}

// One way of splitting at a time: the plan's check refuses two, naming the field.
TEST(PipelineSplit, OneWayOfSplittingAtATime) {
  costmodel::ParallelPlan p = test::plan_of(1, 1, 2, 4);
  p.stage_layers = {1, 1};
  p.pipeline_layout = "Et|tL";
  const std::string e = error_of([&] { costmodel::check(p); });
  EXPECT_NE(e.find("pipeline_layout"), std::string::npos) << e;
  EXPECT_NE(e.find("one way of splitting the layers"), std::string::npos) << e;
}

// Too few layers for the stages: where counting the embedding and the loss would fit (126 + 2 on
// 128), the refusal names Megatron-Core's flags; where it would not (126 + 2 on 127), it does not.
TEST(PipelineSplit, RefusalNamesTheCountedSplitWhereItFits) {
  costmodel::ParallelPlan p = test::plan_of(1, 1, 16, 32);
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 8;
  const std::string fits = error_of([&] { costmodel::partition_layers(with_layers(126, 0), p, 128); });
  EXPECT_NE(fits.find("fewer than the 128 stages"), std::string::npos) << fits;
  EXPECT_NE(fits.find("--account-for-embedding-in-pipeline-split"), std::string::npos) << fits;
  const std::string other = error_of([&] { costmodel::partition_layers(with_layers(126, 0), p, 127); });
  EXPECT_EQ(other.find("--account-for"), std::string::npos) << other;
  p.account_for_embedding = p.account_for_loss = true;
  EXPECT_EQ(costmodel::partition_layers(with_layers(126, 0), p, 128).front(), 0);
}

// The split reaches the workload: with the embedding and loss counted, tiny's 4 layers on 6
// stages (pp 2 x vp 3) are 0, 1, 1, 1, 1, 0: the first stage holds the embedding's parameters
// alone and the last the head's; a module on a stage of its own computes its own output head.
TEST(PipelineSplit, ZeroLayerEndStagesAndAModuleStageInTheWorkload) {
  const costmodel::ClusterSpec c = test::cluster_of("h100-ib-1024", 1);
  costmodel::ParallelPlan p = test::plan_of(1, 1, 2, 4);
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 3;
  p.account_for_embedding = p.account_for_loss = true;
  const ModelSpec m = with_layers(4, 0);
  const costmodel::PlanWorkload w = costmodel::build_plan_workload(m, c, p, costmodel::plan_schedule(p));
  ASSERT_EQ(w.stages.size(), 6u);
  EXPECT_EQ(w.stages[0].layers, 0);
  EXPECT_EQ(w.stages[5].layers, 0);
  EXPECT_DOUBLE_EQ(w.stages[0].params, costmodel::memory::embedding_params_per_rank(m, 1));
  EXPECT_DOUBLE_EQ(w.stages[5].params, costmodel::memory::head_params_per_rank(m, 1));
  EXPECT_EQ(w.stages[5].head_passes, 1);

  costmodel::ParallelPlan q = p;
  q.account_for_embedding = q.account_for_loss = false;
  q.pipeline_layout = "Et|t|t|t|m|L";
  const ModelSpec with_mtp = with_layers(4, 1);
  const costmodel::PlanWorkload v = costmodel::build_plan_workload(with_mtp, c, q, costmodel::plan_schedule(q));
  EXPECT_EQ(v.stages[4].mtp_layers, 1);
  EXPECT_EQ(v.stages[4].layers, 1);
  EXPECT_EQ(v.stages[4].head_passes, 1);
  EXPECT_TRUE(v.stages[4].head);
  EXPECT_EQ(v.stages[5].head_passes, 1);
  EXPECT_EQ(v.stages[5].mtp_layers, 0);
  EXPECT_EQ(v.stages[3].head_passes, 0);
}

// The evaluator and the simulator agree on a plan with zero-layer stages (no contention: one node).
TEST(PipelineSplit, EvaluatorAndSimulatorAgreeWithEmptyEndStages) {
  costmodel::ParallelPlan p = test::plan_of(1, 1, 2, 4);
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 3;
  p.account_for_embedding = p.account_for_loss = true;
  const costmodel::Estimate e = costmodel::estimate(with_layers(4, 0), test::cluster_of("h100-ib-1024", 1), p);
  EXPECT_EQ(e.costs.stages[0].layers, 0);
  const sim::SimResult r = test::simulate_estimate(e, sim::TpComm::Folded);
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
}

}  // namespace
}  // namespace stagecraft
