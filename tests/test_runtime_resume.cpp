// Checkpoints: a run saved after k steps and resumed for n more gives exactly the losses of
// an uninterrupted run of k + n steps; incomplete or mismatched checkpoints are refused.
#include <filesystem>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

const std::string kFlags = "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --seed 3";

// Saved after 3 steps and resumed for 3 more against 6 uninterrupted steps.
void check_resume(const std::string& flags, int world) {
  std::string dir = temp_path("ckpt");
  TrainRun full = train(flags + " --steps 6");
  ASSERT_EQ(full.cli.exit_code, 0) << full.cli.err;
  TrainRun first = train(flags + " --steps 3 --save " + dir);
  ASSERT_EQ(first.cli.exit_code, 0) << first.cli.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/meta.json"));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(std::filesystem::exists(dir + "/rank-" + std::to_string(r) + ".pt"));
  TrainRun second = train(flags + " --steps 3 --resume " + dir);
  ASSERT_EQ(second.cli.exit_code, 0) << second.cli.err;
  std::vector<double> a = losses(full.summary), b = losses(first.summary), c = losses(second.summary);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(c.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], a[static_cast<size_t>(i)]) << "step " << i;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c[static_cast<size_t>(i)], a[static_cast<size_t>(i + 3)]) << "step " << i + 3;
  EXPECT_EQ(second.summary["steps"][0]["step"].get<int>(), 3);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeResume, ResumedRunContinuesTheLossCurveExactly) { check_resume(kFlags, 4); }

// FOLD3D defers a share of each stage's reduction and update to the next iteration: the
// last step's share is applied before the checkpoint is written. Two segments on one
// pipeline rank, dp 2, so that the deferred shares are all-reduced.
TEST(RuntimeResume, DeferredReductionSharesAreInTheCheckpoint) {
  check_resume("--model tiny --nproc 2 --dp 2 --microbatches 4 --seed 3 --schedule fold3d-aiao", 2);
}

TEST(RuntimeResume, RefusesIncompleteAndMismatchedCheckpoints) {
  std::string dir = temp_path("ckpt_bad");
  std::filesystem::create_directories(dir);
  TrainRun none = train(kFlags + " --steps 1 --resume " + dir);
  EXPECT_NE(none.cli.exit_code, 0);
  EXPECT_NE(none.cli.err.find("meta.json"), std::string::npos) << none.cli.err;
  TrainRun saved = train(kFlags + " --steps 1 --save " + dir);
  ASSERT_EQ(saved.cli.exit_code, 0) << saved.cli.err;
  TrainRun other = train("--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --seed 4 --steps 1 --resume " + dir);
  EXPECT_NE(other.cli.exit_code, 0);
  EXPECT_NE(other.cli.err.find("seed"), std::string::npos) << other.cli.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace stagecraft::test
