// Sequence parallelism in the runtime (`--sequence-parallel`, runtime/model.h, docs/runtime.md
// "Sequence parallelism"): outside the tensor-parallel blocks each tp rank holds s/t tokens, a
// block all-gathers the sequence and reduce-scatters its output. Losses equal a single process's
// within 1e-5 for tp 2 and 4, with pp and cp, for a GPT (learned positions, biases),
// a LLaMA (rotary, RMSNorm) and a mixture of experts (expert tensor parallelism = tp, alone and
// with ep 2); a rank's tp collectives per step follow the closed form; tp overlap other than
// blocking exits 2 naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

constexpr int kSteps = 3;
constexpr int kGlobalMicrobatches = 4;

std::string model(const std::string& name) { return data_path("models/" + name + ".json"); }

std::string flags(const std::string& m, int dp) {
  return "--model " + model(m) + " --steps " + std::to_string(kSteps) + " --seed 7 --lr 3e-3 --timeout 60 --microbatches " +
         std::to_string(kGlobalMicrobatches / dp);
}

std::vector<double> single_losses(const std::string& m) {
  const TrainRun& r = train_once(flags(m, 1) + " --schedule gpipe");
  return r.cli.exit_code == 0 ? losses(r.summary) : std::vector<double>{};
}

// `grid`: the parallel sizes and their --nproc; `dp`: its data-parallel size.
void expect_parity(const std::string& m, const std::string& grid, int dp) {
  const std::vector<double> ref = single_losses(m);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  const std::string args = flags(m, dp) + " " + grid + " --sequence-parallel";
  TrainRun r = train(args);
  ASSERT_EQ(r.cli.exit_code, 0) << args << "\n" << r.cli.err;
  const std::vector<double> got = losses(r.summary);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << args << ": step " << i;
}

TEST(RuntimeSequenceParallel, GptLossesEqualSingleProcess) {
  expect_parity("runtime-tiny8", "--nproc 2 --tp 2 --dp 1", 1);
  expect_parity("runtime-tiny8", "--nproc 4 --tp 4 --dp 1", 1);
  expect_parity("runtime-tiny8", "--nproc 4 --tp 2 --pp 2 --dp 1 --schedule 1f1b", 1);
  expect_parity("runtime-tiny8", "--nproc 4 --tp 2 --cp 2 --dp 1 --attention-kernel fused", 1);
}

TEST(RuntimeSequenceParallel, LlamaLossesEqualSingleProcess) {
  expect_parity("runtime-tiny8-llama", "--nproc 2 --tp 2 --dp 1 --recompute selective", 1);
  expect_parity("runtime-tiny8-gqa", "--nproc 4 --tp 2 --pp 2 --dp 1 --schedule interleaved-1f1b", 1);
}

// Experts under tp (Megatron-Core's rule: with sequence parallelism): every tp rank routes the
// gathered sequence alike and holds a tp slice of each expert; with ep 2 the all-to-alls run in
// the ep group of its tp index.
TEST(RuntimeSequenceParallel, ExpertsUnderTensorParallelismEqualSingleProcess) {
  expect_parity("runtime-tiny8-moe", "--nproc 2 --tp 2 --dp 1", 1);
  expect_parity("runtime-tiny8-moe", "--nproc 4 --tp 2 --dp 2 --ep 2", 2);
}

// One stage of L layers, m microbatches, GPT (biases and norms replicated): per layer forward 2
// all-gathers and 2 reduce-scatters, as many in the backward; plus the embedding's
// reduce-scatter, the head's all-gather and the loss's two all-reduces forward, and their
// backward counterparts (the gather's reduce-scatter, the embedding's all-gather); and one
// all-reduce of a replicated gradient per use: 6 per layer (two norms' weights and biases, two
// output biases), the final norm's 2 and the position embedding's 1.
TEST(RuntimeSequenceParallel, TpCollectivesPerStepFollowTheClosedForm) {
  constexpr long kLayers = 8, m = kGlobalMicrobatches;
  TrainRun r = train(flags("runtime-tiny8", 1) + " --nproc 2 --tp 2 --dp 1 --sequence-parallel");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  const long per_microbatch = kLayers * (4 + 4 + 6) + (1 + 1 + 2) + (1 + 1) + (2 + 1);
  EXPECT_EQ(r.summary["steps"][1]["tp_collectives"].get<long>(), 2 * per_microbatch * m);  // summed over the 2 ranks
  std::cout << "tp 2 with sequence parallelism: " << r.summary["steps"][1]["tp_collectives"] << " tp collectives per step\n";
}

TEST(RuntimeSequenceParallel, TpOverlapPiecesAreRefused) {
  expect_train_refused(flags("runtime-tiny8", 1) + " --nproc 2 --tp 2 --dp 1 --sequence-parallel --microbatch-size 2 --tp-overlap merak",
                       "tp_overlap 'merak'");
}

}  // namespace
}  // namespace stagecraft::test
