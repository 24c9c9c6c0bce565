// Parity: every registered schedule the runtime executes, on several (dp, tp, pp) grids,
// gives the per-step losses of a single-process run of the same model and global batch
// (6 steps, within 1e-5 relative, fp32); Chimera's two chains and FOLD3D's deferred
// reduction shares included. A schedule the runtime refused would say so before training
// (exit 2, "runtime:") and fail the test: every schedule whose generator accepts the grid runs.
#include <cmath>
#include <ostream>
#include <set>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

struct Grid3 {
  int dp, tp, pp;
  std::set<std::string> only;  // the schedules run on this grid; empty: every one its generator accepts
};
void PrintTo(const Grid3& g, std::ostream* os) { *os << "dp " << g.dp << " tp " << g.tp << " pp " << g.pp; }

const char* kModel = STAGECRAFT_TEST_DATA "/models/runtime-tiny8.json";
constexpr int kMicrobatches = 8;
constexpr int kSteps = 6;  // enough for the losses to move and to differ by schedule (10 until stop 43: CI time)

std::string common_flags() {
  return std::string("--model ") + kModel + " --steps " + std::to_string(kSteps) + " --seed 7 --lr 3e-3 --timeout 60";
}

std::vector<double> reference(int dp) {
  static std::map<int, std::vector<double>> cache;
  auto it = cache.find(dp);
  if (it != cache.end()) return it->second;
  TrainRun r = train(common_flags() + " --dp 1 --tp 1 --pp 1 --schedule gpipe --microbatches " + std::to_string(dp * kMicrobatches));
  EXPECT_EQ(r.cli.exit_code, 0) << r.cli.err;
  return cache[dp] = r.cli.exit_code == 0 ? losses(r.summary) : std::vector<double>{};
}

// Whether the plan's generator accepts this configuration (its own constraints).
bool generator_accepts(const std::string& schedule, const Grid3& g) {
  costmodel::ParallelPlan p;
  p.dp = g.dp;
  p.tp = g.tp;
  p.pp = g.pp;
  p.num_microbatches = kMicrobatches;
  p.schedule = schedule;
  try {
    schedules::Schedule s = costmodel::plan_schedule(p);
    return s.stages_per_chain() <= presets::load_model(kModel).num_layers;
  } catch (const InputError&) {
    return false;
  }
}

class RuntimeParity : public ::testing::TestWithParam<Grid3> {};

TEST_P(RuntimeParity, LossesEqualSingleProcess) {
  const Grid3 g = GetParam();
  const std::vector<double> ref = reference(g.dp);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  std::set<std::string> ran, refused;
  for (const auto& gen : schedules::generators()) {
    if ((!g.only.empty() && !g.only.count(gen.name)) || !generator_accepts(gen.name, g)) continue;
    std::string args = common_flags() + " --nproc " + std::to_string(g.dp * g.tp * g.pp) + " --dp " + std::to_string(g.dp) +
                       " --tp " + std::to_string(g.tp) + " --pp " + std::to_string(g.pp) + " --microbatches " +
                       std::to_string(kMicrobatches) + " --schedule " + gen.name;
    TrainRun r = train(args);
    if (r.cli.exit_code == 2 && r.cli.err.find("runtime:") != std::string::npos) {
      refused.insert(gen.name + ": " + r.cli.err.substr(0, 200));
      continue;
    }
    ASSERT_EQ(r.cli.exit_code, 0) << gen.name << "\n" << r.cli.err;
    std::vector<double> got = losses(r.summary);
    ASSERT_EQ(got.size(), ref.size()) << gen.name;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << gen.name << " step " << i;
    ran.insert(gen.name);
  }
  std::string list;
  for (const auto& s : refused) list += "  refused " + s + "\n";
  for (const char* core : {"gpipe", "1f1b"}) EXPECT_TRUE(ran.count(core)) << core << " did not run\n" << list;
  EXPECT_TRUE(refused.empty()) << list;
  std::cout << "ran " << ran.size() << " schedules\n" << list;
  // The loss must move: a run that trains nothing would also "match".
  EXPECT_LT(ref.back(), ref.front());
}

INSTANTIATE_TEST_SUITE_P(Grids, RuntimeParity,
                         // Every schedule with pp 2 alone; with pp 4 those whose order depends on the depth
                         // beyond 2 (interleaving, looping, V shapes, waves, chains, Merak's shift, zero
                         // bubble's r-dependent delays and DualPipe's pairs) and 1F1B. The dp ranks of a stage reduce its
                         // gradients whatever the order, and the tp ranks of a stage run its action list
                         // together, so with dp 2 or tp 2 one schedule per family stands for the rest: whole
                         // backward (gpipe, 1f1b), several stages a rank (interleaved-1f1b), split backward
                         // (zb-h1), V-shaped (zb-v), two chains (chimera), waves (hanayo), deferred reductions
                         // (fold3d-aiao) and overlapped pairs (dualpipev). Without a pipeline (dp 2 x tp 2) the
                         // schedules differ only in their order of F, B and W on one stage: whole and split
                         // backward stand for the rest.
                         ::testing::Values(Grid3{1, 1, 2, {}},
                                           Grid3{2, 1, 2, {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "chimera", "hanayo",
                                                           "fold3d-aiao", "dualpipev"}},
                                           Grid3{1, 2, 2, {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "chimera", "hanayo"}},
                                           Grid3{2, 2, 1, {"gpipe", "1f1b", "zb-h1"}},
                                           Grid3{1, 1, 4, {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h2", "zb-v", "zb1p",
                                                           "chimera", "hanayo", "merak", "dualpipe", "dualpipev"}}),
                         [](const auto& info) {
                           const Grid3& g = info.param;
                           return "dp" + std::to_string(g.dp) + "_tp" + std::to_string(g.tp) + "_pp" + std::to_string(g.pp);
                         });

// Interleaved stages with recomputation, an explicit uneven layer split (stagecraft's, and
// Megatron-Core's layout and split with the embedding and the loss counted, whose first and last
// stages hold no layer), and selective recomputation (the attention core recomputed in its
// backward) with tp 2.
TEST(RuntimeParity, RecomputeAndStageLayersMatch) {
  const std::vector<double> ref = reference(1);
  for (const std::string extra : {"--nproc 2 --schedule interleaved-1f1b --chunks 2 --recompute full",
                                  "--nproc 2 --schedule 1f1b --stage-layers 3,5",
                                  "--nproc 2 --schedule 1f1b --pipeline-layout 'Et*2|t*6L'",
                                  "--nproc 2 --schedule interleaved-1f1b --chunks 5 --account-for-embedding-in-pipeline-split "
                                  "--account-for-loss-in-pipeline-split",
                                  "--nproc 4 --tp 2 --schedule 1f1b --recompute selective"}) {
    TrainRun r = train(common_flags() + " --pp 2 --microbatches 8 " + extra);
    ASSERT_EQ(r.cli.exit_code, 0) << extra << "\n" << r.cli.err;
    std::vector<double> got = losses(r.summary);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << extra << " step " << i;
  }
}

// Today's open models' features: grouped-query attention (2 key/value heads for 4 query heads),
// and the LLaMA decoder (RMSNorm, SwiGLU, rotary positions, no biases) with it. tp 2 splits the
// key/value heads (one per rank) with the query heads that read them, and selective
// recomputation recomputes the grouped core; the losses equal a single process's, and differ
// from multi-head GPT's.
TEST(RuntimeParity, GroupedQueryAttentionAndLlamaMatch) {
  const std::vector<double> mha = reference(1);
  for (const char* model : {"runtime-tiny8-gqa", "runtime-tiny8-llama"}) {
    const std::string flags = std::string("--model ") + STAGECRAFT_TEST_DATA "/models/" + model + ".json --steps " +
                              std::to_string(kSteps) + " --seed 7 --lr 3e-3 --timeout 60";
    TrainRun one = train(flags + " --schedule gpipe --microbatches 8");
    ASSERT_EQ(one.cli.exit_code, 0) << model << "\n" << one.cli.err;
    TrainRun split = train(flags + " --nproc 4 --tp 2 --pp 2 --schedule 1f1b --microbatches 8 --recompute selective");
    ASSERT_EQ(split.cli.exit_code, 0) << model << "\n" << split.cli.err;
    const std::vector<double> ref = losses(one.summary), got = losses(split.summary);
    ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps)) << model;
    ASSERT_EQ(got.size(), ref.size()) << model;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << model << " step " << i;
    EXPECT_GT(std::fabs(ref.back() - mha.back()), 1e-4) << model << ": the same losses as multi-head GPT";
    EXPECT_LT(ref.back(), ref.front()) << model;
  }
}

}  // namespace
}  // namespace stagecraft::test
