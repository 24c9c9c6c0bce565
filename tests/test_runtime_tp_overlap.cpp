// Tensor-parallel overlap in the runtime (runtime/tp_pieces.h): merak, cross-pass and oases
// split each microbatch into two sub-batches and run the stage's blocks piece by piece with
// asynchronous tp all-reduces; the training must equal Megatron's blocking execution (losses
// within 1e-5 relative and squared gradient sums within 1e-4, fp32), issue exactly the collectives its inner schedule has, and show
// the collectives in the trace inside their compute actions, overlapping the other sub-batch.
#include <cmath>
#include <fstream>
#include <map>
#include <ostream>

#include "costmodel/specs.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

const char* kModel = STAGECRAFT_TEST_DATA "/models/runtime-tiny8.json";  // 8 layers, h 32, s 16
constexpr int kLayers = 8;
constexpr int kMicrobatches = 4;
constexpr int kSteps = 2;
const char* kModes[] = {"merak", "cross-pass", "oases"};

struct Grid {
  int tp, pp;
};
void PrintTo(const Grid& g, std::ostream* os) { *os << "tp " << g.tp << " pp " << g.pp; }

std::string flags(const Grid& g, const std::string& recompute, const std::string& mode) {
  return std::string("--model ") + kModel + " --nproc " + std::to_string(g.tp * g.pp) + " --tp " + std::to_string(g.tp) +
         " --pp " + std::to_string(g.pp) + " --microbatch-size 2 --microbatches " + std::to_string(kMicrobatches) +
         " --steps " + std::to_string(kSteps) + " --seed 7 --lr 1e-2 --timeout 60 --recompute " + recompute +
         " --tp-overlap " + mode;
}

// Runs each distinct command once per test program.
const TrainRun& cached(const std::string& args) {
  static std::map<std::string, TrainRun> runs;
  auto it = runs.find(args);
  if (it == runs.end()) it = runs.emplace(args, train(args)).first;
  return it->second;
}

void expect_same_losses(const TrainRun& got, const TrainRun& ref, const std::string& what) {
  ASSERT_EQ(ref.cli.exit_code, 0) << "blocking reference of " << what << "\n" << ref.cli.err;
  ASSERT_EQ(got.cli.exit_code, 0) << what << "\n" << got.cli.err;
  const std::vector<double> a = losses(got.summary), b = losses(ref.summary);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps)) << what;
  ASSERT_EQ(b.size(), a.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::fabs(b[i])) << what << " step " << i;
  EXPECT_NE(b[0], b[1]) << "the reference did not train: " << what;
  // AdamW is blind to a gradient's scale; the gradients themselves must match too.
  for (size_t i = 0; i < a.size(); ++i) {
    const double ga = got.summary["steps"][i]["grad_sq_sum"], gb = ref.summary["steps"][i]["grad_sq_sum"];
    EXPECT_GT(gb, 0) << what;
    EXPECT_NEAR(ga, gb, 1e-4 * gb) << what << " squared gradients, step " << i;
  }
}

long collectives_of_step(const TrainRun& r, size_t step) { return r.summary["steps"][step]["tp_collectives"].get<long>(); }

// The model's ends, per microbatch, tp rank and sub-batch: the vocabulary-parallel embedding's
// all-reduce in F; the cross-entropy's two (max, then exponent sums with the target logit) in
// F and the head input's gradient all-reduce in B. Neither end is recomputed.
constexpr long kEmbeddingCollectives = 1, kHeadCollectives = 3;

// What the inner schedules issue: per microbatch and tp rank one all-reduce per block in F and
// in B (and in R, unless oases recomputes without them), each on every sub-batch, and the ends'.
long expected_collectives(const Grid& g, const std::string& recompute, const std::string& mode) {
  const long sub_batches = mode == "blocking" ? 1 : 2;
  const long passes = 2 + (recompute == "full" && mode != "oases" ? 1 : 0);
  const long per_sub_batch = 2 * kLayers * passes + kEmbeddingCollectives + kHeadCollectives;
  return static_cast<long>(g.tp) * kMicrobatches * per_sub_batch * sub_batches;
}

class RuntimeTpOverlap : public ::testing::TestWithParam<std::tuple<Grid, std::string>> {};

TEST_P(RuntimeTpOverlap, LossesEqualBlockingAndCollectivesMatchTheInnerSchedule) {
  const auto& [g, recompute] = GetParam();
  const TrainRun& ref = cached(flags(g, recompute, "blocking"));
  ASSERT_EQ(ref.cli.exit_code, 0) << ref.cli.err;
  EXPECT_EQ(collectives_of_step(ref, 1), expected_collectives(g, recompute, "blocking"));
  for (const char* mode : kModes) {
    const std::string args = flags(g, recompute, mode);
    const TrainRun& r = cached(args);
    expect_same_losses(r, ref, args);
    if (r.cli.exit_code != 0) continue;
    for (size_t s = 0; s < static_cast<size_t>(kSteps); ++s)
      EXPECT_EQ(collectives_of_step(r, s), expected_collectives(g, recompute, mode)) << args << " step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, RuntimeTpOverlap,
                         ::testing::Combine(::testing::Values(Grid{2, 1}, Grid{2, 2}),
                                            ::testing::Values(std::string("none"), std::string("full"))),
                         [](const auto& info) {
                           const Grid& g = std::get<0>(info.param);
                           return "tp" + std::to_string(g.tp) + "_pp" + std::to_string(g.pp) + "_recompute_" +
                                  std::get<1>(info.param);
                         });

// Oases recomputes from the forward's saved block inputs and issues no collective in its
// recomputation; merak and cross-pass repeat every forward all-reduce.
TEST(RuntimeTpOverlapCounts, OasesIssuesFewerCollectivesThanMerakWithFullRecompute) {
  const TrainRun& merak = cached(flags({2, 1}, "full", "merak"));
  const TrainRun& oases = cached(flags({2, 1}, "full", "oases"));
  ASSERT_EQ(merak.cli.exit_code, 0) << merak.cli.err;
  ASSERT_EQ(oases.cli.exit_code, 0) << oases.cli.err;
  EXPECT_LT(collectives_of_step(oases, 1), collectives_of_step(merak, 1));
  // F + B against F + R + B over the blocks; the ends alike in both.
  const long ends = 2L * kMicrobatches * 2 * (kEmbeddingCollectives + kHeadCollectives);
  EXPECT_EQ(3 * (collectives_of_step(oases, 1) - ends), 2 * (collectives_of_step(merak, 1) - ends));
}

// Zero bubble in V placement: I queues both sub-batches' weight gradients, W computes them;
// with cross-pass the recomputation runs inside I.
TEST(RuntimeTpOverlapSchedules, ZeroBubbleSplitBackwardMatchesBlocking) {
  const std::string extra = " --schedule zb-v";
  const TrainRun& ref = cached(flags({2, 2}, "full", "blocking") + extra);
  const TrainRun& r = cached(flags({2, 2}, "full", "cross-pass") + extra);
  expect_same_losses(r, ref, "zb-v cross-pass");
}

// A plan may choose the mode per stage: an oases stage feeding a blocking one.
TEST(RuntimeTpOverlapSchedules, PerStageModesMatchBlocking) {
  costmodel::ParallelPlan p;
  p.tp = 2;
  p.pp = 2;
  p.stage_tp_overlap = {schedules::TpOverlap::Oases, schedules::TpOverlap::Blocking};
  const std::string plan_path = temp_path("plan.json");
  std::ofstream(plan_path) << costmodel::to_json(p).dump();
  std::string args = flags({2, 2}, "full", "blocking");
  args = args.substr(0, args.find(" --tp-overlap"));  // the plan's per-stage modes apply
  const TrainRun& r = cached(args + " --plan " + plan_path);
  std::remove(plan_path.c_str());
  expect_same_losses(r, cached(flags({2, 2}, "full", "blocking")), "stage_tp_overlap oases,blocking");
  if (r.cli.exit_code != 0) return;
  // Stage 0 (4 layers and the embedding) issues oases' collectives, stage 1 (4 layers and the
  // head) blocking's.
  const long per_mb_rank_stage0 = (2 * 4 * 2 + kEmbeddingCollectives) * 2, per_mb_rank_stage1 = 2 * 4 * 3 + kHeadCollectives;
  EXPECT_EQ(collectives_of_step(r, 1), 2L * kMicrobatches * (per_mb_rank_stage0 + per_mb_rank_stage1));
}

TEST(RuntimeTpOverlapInput, OddMicrobatchSizeIsRefused) {
  TrainRun r = train(std::string("--model ") + kModel + " --nproc 2 --tp 2 --microbatch-size 3 --microbatches 2 --steps 1 "
                     "--tp-overlap merak");
  EXPECT_EQ(r.cli.exit_code, 2) << r.cli.err;
  EXPECT_NE(r.cli.err.find("microbatch_size"), std::string::npos) << r.cli.err;
  EXPECT_NE(r.cli.err.find("merak"), std::string::npos) << r.cli.err;
}

// Transformer Engine's chunked overlap (plan.tp_overlap = te) is priced but not run: the runtime
// refuses it by name before any rank starts.
TEST(RuntimeTpOverlapInput, TeIsRefusedBeforeTraining) {
  TrainRun r = train(std::string("--model ") + kModel +
                     " --nproc 2 --tp 2 --sequence-parallel --tp-overlap te --microbatches 2 --steps 1");
  EXPECT_EQ(r.cli.exit_code, 2) << r.cli.err;
  EXPECT_NE(r.cli.err.find("tp_overlap 'te'"), std::string::npos) << r.cli.err;
}

struct Event {
  double ts, end;
  int sub_batch;
};

// In the trace, each tp collective (tid 4) lies inside the compute action (tid 0) that issued
// it, and some collective of one sub-batch is in flight over a whole compute piece (tid 5) of
// the other: the overlap the modes exist for.
TEST(RuntimeTpOverlapTrace, CollectivesLieInsideTheirActionsAndOverlapTheOtherSubBatch) {
  const std::string trace_path = temp_path("trace.json");
  TrainRun r = train(flags({2, 1}, "full", "oases") + " --trace " + trace_path);
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  nlohmann::json trace = nlohmann::json::parse(read_text(trace_path));
  std::remove(trace_path.c_str());
  using Key = std::tuple<int, long, long>;  // (pid, iteration, position)
  std::map<Key, Event> actions;
  std::map<Key, std::vector<Event>> comms, pieces;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const Key k{e["pid"].get<int>(), e["args"]["iteration"].get<long>(), e["args"]["step"].get<long>()};
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    const int tid = e["tid"];
    if (tid == 0) actions[k] = {ts, end, -1};
    if (tid == 4) comms[k].push_back({ts, end, e["args"]["sub_batch"].get<int>()});
    if (tid == 5) pieces[k].push_back({ts, end, e["args"]["sub_batch"].get<int>()});
  }
  long total = 0, overlapping = 0;
  for (const auto& [k, list] : comms) {
    ASSERT_TRUE(actions.count(k)) << "a collective outside any compute action";
    const Event& a = actions.at(k);
    for (const Event& c : list) {
      ++total;
      EXPECT_GE(c.ts, a.ts - 1e-3);
      EXPECT_LE(c.end, a.end + 1e-3);
      for (const Event& p : pieces[k])
        if (p.sub_batch != c.sub_batch && p.ts >= c.ts && p.end <= c.end) {
          ++overlapping;
          break;
        }
    }
  }
  long summary_total = 0;
  for (size_t s = 0; s < static_cast<size_t>(kSteps); ++s) summary_total += collectives_of_step(r, s);
  // The vocabulary-parallel ends' collectives block inside the embedding's and the head's
  // pieces; the trace draws the blocks' (per step, tp rank, microbatch and sub-batch).
  const long ends = 2L * kMicrobatches * 2 * (kEmbeddingCollectives + kHeadCollectives);
  EXPECT_EQ(total + kSteps * ends, summary_total);
  EXPECT_GT(overlapping, total / 4) << overlapping << " of " << total << " collectives overlap a piece of the other sub-batch";
}

}  // namespace
}  // namespace stagecraft::test
