// The runtime's fast paths compute what its plain ones do: bf16 weights kept as one copy per
// update (`--bf16-weights kept`, Megatron-LM's bf16 model parameters beside fp32 main ones)
// train exactly as autocast's cast at each use, with one cast per weight and step instead of one
// per use; AdamW's multi-tensor update (`--adamw foreach`) equals the per-parameter loop,
// whole and sharded (ZeRO 1); the fused kernel is refused where the build has none, TF32 on the
// CPU.
#include <cmath>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

const std::string kTiny8 = "--model " STAGECRAFT_TEST_DATA "/models/runtime-tiny8.json --lr 3e-3 --seed 3 --steps 3";

// `rel`: 0 for bit for bit; else the largest relative difference allowed.
void expect_same_losses(const TrainRun& a, const TrainRun& b, double rel = 0) {
  ASSERT_EQ(a.cli.exit_code, 0) << a.cli.err;
  ASSERT_EQ(b.cli.exit_code, 0) << b.cli.err;
  std::vector<double> la = losses(a.summary), lb = losses(b.summary);
  ASSERT_EQ(la.size(), 3u);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    if (rel == 0) EXPECT_EQ(la[i], lb[i]) << "step " << i;
    else EXPECT_NEAR(la[i], lb[i], rel * std::abs(lb[i])) << "step " << i;
  }
}

// The same operations in the same order, over one list or one parameter at a time: bit for bit
// on the CPU (whose foreach ops loop over the tensors); on a GPU the multi-tensor kernels split
// the lists into chunks of their own, so there to fp32 rounding.
double adamw_tolerance(const TrainRun& r) {
  return r.cli.exit_code == 0 && r.summary["ranks"][0]["device"] == "cpu" ? 0.0 : 1e-6;
}

long casts_per_step(const TrainRun& r) { return r.summary["ranks"][0]["weight_casts_per_step"].get<long>(); }

TEST(RuntimeFastPaths, KeptBf16WeightsTrainAsCastAtEachUse) {
  const std::string flags = kTiny8 + " --microbatches 4 --precision bf16";
  TrainRun kept = train(flags), cast = train(flags + " --bf16-weights cast");
  expect_same_losses(kept, cast);
  // The weights a GPT's products read: per layer qkv, the projection, fc1, fc2; then the head.
  // Kept: each cast once per step (the step changes it); cast: once per microbatch's forward.
  const long weights = 8 * 4 + 1;
  EXPECT_EQ(casts_per_step(kept), weights);
  EXPECT_EQ(casts_per_step(cast), 4 * weights);
}

// FSDP writes its gathered units through an alias autograd does not see: each unit's kept copy
// goes with its release and is made again from the next gather, never read stale.
TEST(RuntimeFastPaths, KeptBf16WeightsUnderFsdp) {
  const std::string flags = kTiny8 + " --nproc 2 --dp 2 --microbatches 2 --zero 3 --precision bf16";
  expect_same_losses(train(flags), train(flags + " --bf16-weights cast"));
}

// A profile builds one model after another in one process: a weight freed and its address
// taken by the next shape's weight must not find the old kept copy (keyed by address alone,
// this profile multiplied a tp 2 layer by a tp 1 copy and failed).
TEST(RuntimeFastPaths, KeptCopiesFollowTheWeightNotItsAddress) {
  const std::string out = temp_path("profile-bf16.json");
  RunResult r = run_cli("profile --precision bf16 --hidden 64 --heads 4 --seq 64 --microbatch-size 1,2 --tp 1,2 --vocab 256 --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::remove(out.c_str());
}

TEST(RuntimeFastPaths, ForeachAdamWEqualsTheLoop) {
  TrainRun loop = train(kTiny8 + " --microbatches 2 --adamw loop");
  expect_same_losses(loop, train(kTiny8 + " --microbatches 2 --adamw foreach"), adamw_tolerance(loop));
  // Sharded: each member's owned elements of each parameter, as flat views.
  const std::string zero1 = kTiny8 + " --nproc 2 --dp 2 --microbatches 2 --zero 1";
  TrainRun sharded_loop = train(zero1 + " --adamw loop");
  expect_same_losses(sharded_loop, train(zero1 + " --adamw foreach"), adamw_tolerance(sharded_loop));
}

TEST(RuntimeFastPaths, BadValuesAndAMissingFusedKernelAreRefused) {
  expect_train_refused(kTiny8 + " --adamw fast", "--adamw 'fast' is invalid (allowed: loop, foreach, fused)");
  expect_train_refused(kTiny8 + " --precision bf16 --bf16-weights half", "--bf16-weights 'half' is invalid (allowed: kept, cast)");
  expect_train_refused(kTiny8 + " --backend gloo --tf32", "--tf32: TF32 is a GPU tensor-core format and this run computes on the CPU");
  TrainRun fused = train(kTiny8 + " --adamw fused");
  if (fused.cli.exit_code == 0) {  // LibTorch 2.4+ on the CPU, or a GPU: the fused kernel's losses
    TrainRun loop = train(kTiny8 + " --adamw loop");
    ASSERT_EQ(loop.cli.exit_code, 0) << loop.cli.err;
    std::vector<double> a = losses(fused.summary), b = losses(loop.summary);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i])) << "step " << i;
  } else {
    EXPECT_EQ(fused.cli.exit_code, 2) << fused.cli.err;
    EXPECT_NE(fused.cli.err.find("--adamw fused: this build's LibTorch"), std::string::npos) << fused.cli.err;
  }
}

}  // namespace
}  // namespace stagecraft::test
