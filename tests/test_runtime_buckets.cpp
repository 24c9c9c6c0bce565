// overlap_grad_reduce in the runtime: each gradient bucket's all-reduce starts from the
// parameters' gradient hooks inside the stage's last backward (PyTorch DDP's mechanism), and
// training equals the reduction after the backward.
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

// Trains `flags` without and with --overlap-grad-reduce; checks the losses agree and returns
// the buckets each step of the overlapped run started inside its backward.
std::vector<long> buckets_in_backward(const std::string& flags) {
  TrainRun after = train(flags);
  EXPECT_EQ(after.cli.exit_code, 0) << after.cli.err;
  TrainRun during = train(flags + " --overlap-grad-reduce");
  EXPECT_EQ(during.cli.exit_code, 0) << during.cli.err;
  std::vector<double> a = losses(after.summary), b = losses(during.summary);
  EXPECT_EQ(a.size(), b.size());
  std::vector<long> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 1e-5) << "step " << i;
    EXPECT_EQ(after.summary["steps"][i]["buckets_in_backward"].get<long>(), 0);
    out.push_back(during.summary["steps"][i]["buckets_in_backward"].get<long>());
  }
  return out;
}

// Small buckets (20 KiB) so that each stage has several.
TEST(RuntimeBuckets, LaunchedInsideTheBackwardWithAPipeline) {
  const auto n = buckets_in_backward("--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --steps 4 --seed 3 --grad-bucket-mb 0.02");
  ASSERT_EQ(n.size(), 4u);
  for (long x : n) EXPECT_GT(x, 2);
}

// Zero-bubble's split backward: the stage's last I gives the biases and norms their final
// gradients (tensor hooks), its last W the linear weights theirs, outside autograd (the jobs
// the I queued report each gradient as a hook would); every bucket starts there, none waits
// for the REDUCE_GRAD, and training is unchanged.
TEST(RuntimeBuckets, SplitBackwardStartsBucketsInTheLastIAndW) {
  const auto n = buckets_in_backward(
      "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --steps 3 --seed 4 --schedule zb-h1 --grad-bucket-mb 0.02");
  const auto blocking = buckets_in_backward(
      "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --steps 1 --seed 4 --schedule 1f1b --grad-bucket-mb 0.02");
  ASSERT_EQ(n.size(), 3u);
  ASSERT_EQ(blocking.size(), 1u);
  for (long x : n) EXPECT_EQ(x, blocking[0]);  // the same buckets as with a whole backward
}

}  // namespace
}  // namespace stagecraft::test
