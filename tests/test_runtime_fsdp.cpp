// Fully sharded data parallelism in the runtime (`--zero 3`, runtime/fsdp.h, docs/runtime.md
// "Fully sharded data parallelism"): the parameters sharded over the data-parallel group, each
// unit (layer, embedding, head) all-gathered for its passes. Training equals unsharded training
// to 1e-5 alone and with pp, tp, cp and full recomputation; all-gathers per unit follow the
// closed form (2 a microbatch with reshard-after-forward, 1 without; the embedding's backward
// reads no weight: 1); a rank keeps 1/dp of the parameters (1/shard_group with hybrid sharding,
// which trains the same too); sharded checkpoints resume exactly;
// what the runtime does not run exits 2 naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

constexpr int kLayers = 8;  // runtime-tiny8

std::string tiny8() { return data_path("models/runtime-tiny8.json"); }

// The unsharded run of `flags`, once per flags.
const TrainRun& plain_run(const std::string& flags) { return train_once(flags + " --zero 0"); }

void expect_same_training(const std::string& flags, const std::string& extra = "") {
  const TrainRun& plain = plain_run(flags);
  ASSERT_EQ(plain.cli.exit_code, 0) << plain.cli.err;
  TrainRun sharded = train(flags + " --zero 3" + extra);
  ASSERT_EQ(sharded.cli.exit_code, 0) << flags << extra << "\n" << sharded.cli.err;
  const std::vector<double> a = losses(plain.summary), b = losses(sharded.summary);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * std::fabs(a[i])) << flags << extra << ": step " << i;
  for (size_t i = 0; i < a.size(); ++i) {  // the gradients, from the shards, equal the whole ones
    const double ga = plain.summary["steps"][i]["grad_sq_sum"], gb = sharded.summary["steps"][i]["grad_sq_sum"];
    EXPECT_NEAR(gb, ga, 1e-6 * ga) << flags << extra << ": step " << i;
  }
}

std::string flags(const std::string& grid, int microbatches) {
  return "--model " + tiny8() + " " + grid + " --microbatches " + std::to_string(microbatches) + " --steps 4 --seed 5 --lr 3e-3";
}

TEST(RuntimeFsdp, ShardedParametersTrainAsTheWholeOnes) {
  expect_same_training(flags("--nproc 2 --dp 2", 2));
  expect_same_training(flags("--nproc 2 --dp 2", 2), " --no-reshard-after-forward");
  expect_same_training(flags("--nproc 4 --dp 4 --schedule gpipe", 1), " --recompute full");
}

TEST(RuntimeFsdp, ComposesWithPipelineTensorAndContextParallelism) {
  expect_same_training(flags("--nproc 4 --dp 2 --pp 2 --schedule 1f1b", 4));
  expect_same_training(flags("--nproc 4 --dp 2 --tp 2", 2));
  expect_same_training(flags("--nproc 4 --dp 2 --cp 2 --attention-kernel fused", 2));
}

// One stage, one rank's list 1F1B over m microbatches: each layer and the head are gathered for
// every forward and again for every backward with reshard-after-forward (2m), once per
// forward-backward pair without (m: released when its backward ends); the embedding once per
// forward. A rank keeps its chunk of every bucket: half the parameters at dp 2 (padding aside).
// Hybrid sharding (HSDP): shard over 2 consecutive dp ranks, replicate over the 2 groups; the
// chunks' gradients reduce-scattered in the shard group and all-reduced across the replicas.
TEST(RuntimeFsdp, HybridShardingTrainsAsTheWholeOnes) {
  expect_same_training(flags("--nproc 4 --dp 4", 1), " --shard-group 2");
  const TrainRun& whole = plain_run(flags("--nproc 4 --dp 4", 1));
  TrainRun hybrid = train(flags("--nproc 4 --dp 4", 1) + " --zero 3 --shard-group 2");
  ASSERT_EQ(hybrid.cli.exit_code, 0) << hybrid.cli.err;
  const double whole_bytes = whole.summary["ranks"][0]["param_bytes"].get<double>();
  for (const auto& rank : hybrid.summary["ranks"])  // half the parameters: a shard group of 2
    EXPECT_NEAR(rank["param_bytes"].get<double>(), whole_bytes / 2, 0.01 * whole_bytes);
}

TEST(RuntimeFsdp, GathersPerUnitFollowTheClosedForm) {
  const int m = 2;
  const TrainRun& whole = plain_run(flags("--nproc 2 --dp 2", m));
  ASSERT_EQ(whole.cli.exit_code, 0) << whole.cli.err;
  for (const auto& [extra, per_unit] : {std::pair{std::string(""), 2 * m}, std::pair{std::string(" --no-reshard-after-forward"), m}}) {
    TrainRun r = train(flags("--nproc 2 --dp 2", m) + " --zero 3" + extra);
    ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
    for (const auto& rank : r.summary["ranks"]) {
      EXPECT_EQ(rank["unit_gathers_per_step"].get<long>(), (kLayers + 1) * per_unit + m) << extra;
      const double whole_bytes = whole.summary["ranks"][0]["param_bytes"].get<double>();
      EXPECT_NEAR(rank["param_bytes"].get<double>(), whole_bytes / 2, 0.01 * whole_bytes) << extra;
    }
    std::cout << "zero 3" << extra << ": " << r.summary["ranks"][0]["unit_gathers_per_step"] << " unit all-gathers per step, "
              << r.summary["ranks"][0]["param_bytes"] << " parameter bytes kept of " << whole.summary["ranks"][0]["param_bytes"]
              << "; peak " << r.summary["ranks"][0]["peak_memory_bytes"] << " bytes (zero 0: "
              << whole.summary["ranks"][0]["peak_memory_bytes"] << ")\n";
    EXPECT_LT(r.summary["ranks"][0]["peak_memory_bytes"].get<double>(), whole.summary["ranks"][0]["peak_memory_bytes"].get<double>());
  }
}

// Saved after 2 steps and resumed for 2 more equals 4 uninterrupted steps; the rank files hold
// the parameter chunks (no whole parameter); another dp size's checkpoint is refused.
TEST(RuntimeFsdp, ShardedCheckpointsResumeExactly) {
  const std::string f = "--model " + tiny8() + " --nproc 4 --dp 2 --pp 2 --microbatches 2 --seed 7 --zero 3";
  const std::string dir = temp_path("fsdp_ckpt");
  expect_resume_continues(f, dir);
  TrainRun other = train("--model " + tiny8() + " --nproc 4 --dp 4 --microbatches 1 --seed 7 --zero 3 --steps 1 --resume " + dir);
  EXPECT_NE(other.cli.exit_code, 0);
  EXPECT_NE(other.cli.err.find("--resume: the checkpoint's plan"), std::string::npos) << other.cli.err;
  std::filesystem::remove_all(dir);
}

TEST(RuntimeFsdp, UnsupportedCombinationsExit2NamingTheField) {
  const std::string base = "--model " + tiny8() + " --steps 1 --zero 3";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + " --nproc 4 --dp 4 --shard-group 1", "plan.shard_group = 1"},
      {base + " --nproc 8 --dp 4 --cp 2 --shard-group 2 --attention-kernel fused", "hybrid sharding"},
      {base + " --nproc 4 --dp 2 --pp 2 --microbatches 2 --schedule zb-h1", "split backward"},
      {base + " --nproc 4 --dp 2 --tp 2 --microbatch-size 2 --tp-overlap merak", "tp_overlap"},
  };
  for (const auto& [args, want] : cases) expect_train_refused(args, want);
}

}  // namespace
}  // namespace stagecraft::test
