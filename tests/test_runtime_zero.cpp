// The distributed optimizer in the runtime (plan.zero): gradients reduce-scattered per bucket,
// AdamW states sharded over the data-parallel group, parameters all-gathered after the step.
// Training equals unsharded training; checkpoints hold each member's shard and resume exactly.
#include <filesystem>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

// `extra`: flags of the sharded run alone (the plain run has no distributed optimizer).
void expect_same_training(const std::string& flags, int zero, const std::string& extra = "") {
  TrainRun plain = train(flags + " --zero 0");
  ASSERT_EQ(plain.cli.exit_code, 0) << plain.cli.err;
  TrainRun sharded = train(flags + " --zero " + std::to_string(zero) + extra);
  ASSERT_EQ(sharded.cli.exit_code, 0) << sharded.cli.err;
  std::vector<double> a = losses(plain.summary), b = losses(sharded.summary);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5) << "step " << i;
  EXPECT_LT(a.back(), a.front());  // it trains
  for (size_t i = 0; i < a.size(); ++i) {  // the gradient norm from the shards equals the whole one
    const double ga = plain.summary["steps"][i]["grad_sq_sum"], gb = sharded.summary["steps"][i]["grad_sq_sum"];
    EXPECT_NEAR(gb, ga, 1e-6 * ga) << "step " << i;
  }
}

TEST(RuntimeZero, ShardedOptimizerTrainsAsTheWholeOne) {
  expect_same_training("--model tiny --nproc 2 --dp 2 --microbatches 2 --microbatch-size 2 --steps 5 --seed 5", 1);
}

TEST(RuntimeZero, WithAPipeline) {
  expect_same_training("--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --steps 4 --seed 5", 1);
}

// Megatron-Core's --overlap-param-gather: the all-gathers stay in flight after the step and each
// stage waits for its own at its first compute of the next step; the same training.
TEST(RuntimeZero, OverlappedParameterGather) {
  const std::string flags = "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --steps 4 --seed 5";
  expect_same_training(flags, 1, " --overlap-param-gather");
  // Every step after the first finishes the previous step's gathers inside its compute actions;
  // without the flag the step finishes them itself.
  for (const char* overlap : {" --overlap-param-gather", ""}) {
    TrainRun r = train(flags + " --zero 1" + overlap);
    ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
    const auto& steps = r.summary["steps"];
    ASSERT_EQ(steps.size(), 4u);
    EXPECT_EQ(steps[0]["gathers_overlapped"].get<double>(), 0);
    // With the flag, each of the 4 ranks finishes its one bucket's gather (a stage of tiny, under
    // 130,000 parameters, in one bucket) inside its first compute: 4 a step.
    for (size_t i = 1; i < steps.size(); ++i)
      if (*overlap) EXPECT_EQ(steps[i]["gathers_overlapped"].get<double>(), 4) << "step " << i;
      else EXPECT_EQ(steps[i]["gathers_overlapped"].get<double>(), 0) << "step " << i;
  }
  expect_same_training("--model tiny --nproc 2 --dp 2 --microbatches 2 --steps 4 --seed 6 --grad-bucket-mb 0.01", 1,
                       " --overlap-param-gather");
}

// Zero 2 shards the gradients too, which needs one microbatch per iteration (no accumulation);
// with several the plan is refused.
TEST(RuntimeZero, Zero2WithoutAccumulation) {
  expect_same_training("--model tiny --nproc 2 --dp 2 --microbatches 1 --microbatch-size 2 --steps 4 --seed 5", 2);
  TrainRun refused = train("--model tiny --nproc 2 --dp 2 --microbatches 2 --steps 1 --zero 2");
  EXPECT_EQ(refused.cli.exit_code, 2);
  EXPECT_NE(refused.cli.err.find("plan.zero = 2 with num_microbatches = 2"), std::string::npos) << refused.cli.err;
}

// Small buckets: each bucket's chunks cut parameters in the middle.
TEST(RuntimeZero, BucketsSmallerThanAParameter) {
  expect_same_training("--model tiny --nproc 2 --dp 2 --microbatches 2 --steps 4 --seed 6 --grad-bucket-mb 0.01", 1);
}

// Saved after 2 steps and resumed for 2 more against 4 uninterrupted steps; a checkpoint of
// another dp size (other shards) or of the unsharded optimizer is refused.
TEST(RuntimeZero, CheckpointsHoldTheShards) {
  const std::string flags = "--model tiny --nproc 2 --dp 2 --microbatches 2 --seed 7 --zero 1";
  const std::string dir = temp_path("zero_ckpt");
  std::vector<double> a;
  expect_resume_continues(flags, dir, &a);
  ASSERT_EQ(a.size(), 4u);
  TrainRun unsharded = train("--model tiny --nproc 2 --dp 2 --microbatches 2 --seed 7 --zero 0 --steps 1 --resume " + dir);
  EXPECT_NE(unsharded.cli.exit_code, 0);
  std::filesystem::remove_all(dir);
  // With the gathers in flight at the end of a step, the checkpoint holds them finished.
  TrainRun first_o = train(flags + " --overlap-param-gather --steps 2 --save " + dir);
  ASSERT_EQ(first_o.cli.exit_code, 0) << first_o.cli.err;
  TrainRun second_o = train(flags + " --overlap-param-gather --steps 2 --resume " + dir);
  ASSERT_EQ(second_o.cli.exit_code, 0) << second_o.cli.err;
  std::vector<double> d = losses(second_o.summary);
  ASSERT_EQ(d.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(d[static_cast<size_t>(i)], a[static_cast<size_t>(i + 2)], 1e-6) << "step " << i + 2;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace stagecraft::test
