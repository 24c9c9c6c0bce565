// Operation times in the runtime (`train --op-times`, runtime/op_times.h, docs/runtime.md
// "Operation times"): each rank's iteration split into matrix products, attention cores, other
// compute, optimizer, communication and idle time. The parts are disjoint (products and cores
// inside the compute actions, the optimizer apart) and add up to the iteration; without the flag
// nothing is recorded. No timing is asserted, only the accounting.
#include <gtest/gtest.h>

#include <iostream>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

std::string flags(const std::string& extra) {
  return "--model " + data_path("models/runtime-tiny8.json") + " --steps 3 --seed 7 --microbatches 4 " + extra;
}

void expect_accounted(const nlohmann::json& summary, const std::string& what) {
  for (const auto& rank : summary["ranks"]) {
    ASSERT_TRUE(rank.contains("breakdown_s")) << what;
    const auto& b = rank["breakdown_s"];
    const double G = b["gemm_s"], A = b["attention_core_s"], O = b["other_compute_s"], P = b["optimizer_s"];
    const double M = b["communication_s"], I = b["idle_s"], T = rank["iteration_time_s"], C = rank["compute_s"];
    EXPECT_GT(G, 0) << what;
    EXPECT_GT(A, 0) << what;
    EXPECT_GT(P, 0) << what;
    EXPECT_GT(O, 0) << what << ": products, cores and optimizer within the compute actions' time";
    EXPECT_NEAR(G + A + O + P, C, 1e-9 + 1e-9 * C) << what;
    EXPECT_NEAR(G + A + O + P + M + I, T, 1e-6 * T) << what;
    std::cout << what << " rank " << rank["rank"] << ": " << T * 1e3 << " ms = products " << G * 1e3 << " + core " << A * 1e3
              << " + other " << O * 1e3 << " + optimizer " << P * 1e3 << " + communication " << M * 1e3 << " + idle "
              << I * 1e3 << "\n";
  }
}

TEST(RuntimeOpTimes, TheIterationSplitsIntoDisjointKinds) {
  TrainRun one = train(flags("--op-times"));
  ASSERT_EQ(one.cli.exit_code, 0) << one.cli.err;
  expect_accounted(one.summary, "one rank");
  EXPECT_NE(one.cli.out.find("rank 0: "), std::string::npos) << one.cli.out;  // the printed split
  // A pipeline (the backward's spans from autograd's own order), selective recomputation (the
  // core recomputed inside its backward) and tensor parallelism (collectives inside the blocks).
  TrainRun pp = train(flags("--op-times --nproc 2 --pp 2 --dp 1 --schedule 1f1b --recompute selective"));
  ASSERT_EQ(pp.cli.exit_code, 0) << pp.cli.err;
  expect_accounted(pp.summary, "pp 2");
  TrainRun tp = train(flags("--op-times --nproc 2 --tp 2 --dp 1"));
  ASSERT_EQ(tp.cli.exit_code, 0) << tp.cli.err;
  expect_accounted(tp.summary, "tp 2");
}

TEST(RuntimeOpTimes, NothingRecordedWithoutTheFlag) {
  TrainRun r = train(flags(""));
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  for (const auto& rank : r.summary["ranks"]) EXPECT_FALSE(rank.contains("breakdown_s"));
}

}  // namespace
}  // namespace stagecraft::test
