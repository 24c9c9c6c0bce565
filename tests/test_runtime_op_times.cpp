// Operation times in the runtime (`train --op-times`, runtime/op_times.h, docs/runtime.md
// "Operation times"): each rank's iteration split into matrix products, attention cores, other
// compute, optimizer, communication and idle time; without the flag nothing is recorded. The
// report derives other compute and idle time as remainders, so those sums hold by construction;
// what is checked is the measurements against totals measured apart: the op spans (the
// executor's timeline marks) and the optimizer step within the compute actions' time, compute and
// communication within each step's clock, and the steps within the test's own clock around the
// whole run. Times vary with the machine's load: bounds only, no timing asserted.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

constexpr int kSteps = 3;

std::string flags(const std::string& extra) {
  return "--model " + data_path("models/runtime-tiny8.json") + " --steps " + std::to_string(kSteps) +
         " --seed 7 --microbatches 4 " + extra;
}

// A run and the wall time of the whole command, by the test's clock.
struct TimedRun {
  TrainRun run;
  double wall_s = 0;
};

TimedRun timed_train(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  TimedRun r{train(args)};
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void expect_accounted(const TimedRun& r, const std::string& what) {
  ASSERT_EQ(r.run.cli.exit_code, 0) << what << "\n" << r.run.cli.err;
  for (const auto& rank : r.run.summary["ranks"]) {
    ASSERT_TRUE(rank.contains("breakdown_s")) << what;
    const auto& b = rank["breakdown_s"];
    const double G = b["gemm_s"], A = b["attention_core_s"], O = b["other_compute_s"], P = b["optimizer_s"];
    const double M = b["communication_s"], I = b["idle_s"], T = rank["iteration_time_s"], C = rank["compute_s"];
    // Each kind recorded, and products, cores and the optimizer step inside the compute actions'
    // time with room for the memory-bound kernels beside them.
    EXPECT_GT(G, 0) << what;
    EXPECT_GT(A, 0) << what;
    EXPECT_GT(P, 0) << what;
    EXPECT_LT(G + A + P, C) << what;
    // Compute and communication within the step's own clock.
    EXPECT_LE(C + M, T * (1 + 1e-6)) << what;
    // The steady steps (all but the first) within the wall time of the whole command.
    EXPECT_LT((kSteps - 1) * T, r.wall_s) << what;
    std::cout << what << " rank " << rank["rank"] << ": " << T * 1e3 << " ms = products " << G * 1e3 << " + core " << A * 1e3
              << " + other " << O * 1e3 << " + optimizer " << P * 1e3 << " + communication " << M * 1e3 << " + idle "
              << I * 1e3 << " (run " << r.wall_s << " s)\n";
  }
}

TEST(RuntimeOpTimes, TheIterationSplitsIntoDisjointKinds) {
  const TimedRun one = timed_train(flags("--op-times"));
  expect_accounted(one, "one rank");
  EXPECT_NE(one.run.cli.out.find("rank 0: "), std::string::npos) << one.run.cli.out;  // the printed split
  // A pipeline (the backward's spans from autograd's own order), selective recomputation (the
  // core recomputed inside its backward) and tensor parallelism (collectives inside the blocks).
  expect_accounted(timed_train(flags("--op-times --nproc 2 --pp 2 --dp 1 --schedule 1f1b --recompute selective")), "pp 2");
  expect_accounted(timed_train(flags("--op-times --nproc 2 --tp 2 --dp 1")), "tp 2");
}

TEST(RuntimeOpTimes, NothingRecordedWithoutTheFlag) {
  TrainRun r = train(flags(""));
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  for (const auto& rank : r.summary["ranks"]) EXPECT_FALSE(rank.contains("breakdown_s"));
}

}  // namespace
}  // namespace stagecraft::test
