// Measured memory in the runtime: on the CPU a counting allocator (runtime/memory_counter.h)
// records live tensor bytes per rank; each step's peak, the parameters and the optimizer state
// are reported per rank, and the trace has a memory counter track. The parameters and the
// optimizer state are checked exactly against the cost model's accounting (memory.h: 4 bytes of
// fp32 weights and 8 of AdamW moments per parameter).
#include <algorithm>
#include <map>

#include "costmodel/estimate.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

TEST(RuntimeMemory, CountedPeakWithParametersAndOptimizerStateAsTheModelCounts) {
  const std::string flags = "--model tiny --pp 2 --microbatches 4";
  const std::string trace = temp_path("trace.json");
  TrainRun run = train(flags + " --nproc 2 --steps 3 --trace " + trace);
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.err;
  RunResult est = run_cli("estimate " + flags + " --cluster local-cpu-2 --json");
  ASSERT_EQ(est.exit_code, 0) << est.err;
  const nlohmann::json e = nlohmann::json::parse(est.out);
  ASSERT_EQ(run.summary["ranks"].size(), 2u);
  for (const auto& r : run.summary["ranks"]) {
    const int pp = r["pp"].get<int>();
    EXPECT_EQ(r["peak_memory_kind"], "live tensors (counting allocator)");
    const double params = r["param_bytes"].get<double>(), states = r["optimizer_state_bytes"].get<double>();
    // The model's static bytes of this rank: 4 (weights) + 4 (gradients) + 8 (moments) per parameter.
    EXPECT_DOUBLE_EQ(params, e["static_memory_bytes"][pp].get<double>() / 16 * 4) << "pp " << pp;
    EXPECT_DOUBLE_EQ(states, 2 * params) << "pp " << pp;
    // The peak holds the parameters, the moments and what the iteration keeps; far below the
    // process's resident set (LibTorch itself).
    EXPECT_GT(r["peak_memory_bytes"].get<double>(), params + states) << "pp " << pp;
    EXPECT_LT(r["peak_memory_bytes"].get<double>(), r["peak_rss_bytes"].get<double>()) << "pp " << pp;
  }
  // The counter track: one sample per action of every rank and step, never above that rank's peak.
  const nlohmann::json t = nlohmann::json::parse(read_text(trace));
  std::remove(trace.c_str());
  std::map<int, double> top;  // rank -> largest sample (MiB)
  std::map<int, size_t> samples;  // rank -> samples
  for (const auto& ev : t["traceEvents"])
    if (ev["ph"] == "C" && ev["name"] == "memory") {
      ++samples[ev["pid"].get<int>()];
      top[ev["pid"].get<int>()] = std::max(top[ev["pid"].get<int>()], ev["args"]["live tensors (MiB)"].get<double>());
    }
  const schedules::Schedule s = costmodel::plan_schedule(plan_of(1, 1, 2, 4));  // the run's 1F1B
  for (const auto& r : run.summary["ranks"]) {
    const int g = r["rank"].get<int>();
    ASSERT_TRUE(top.count(g)) << "rank " << g;
    EXPECT_EQ(samples[g], 3 * s.actions[r["pp"].get<size_t>()].size()) << "rank " << g;  // 3 steps
    EXPECT_LE(top[g] * 1024 * 1024, r["peak_memory_bytes"].get<double>() + 1) << "rank " << g;
  }
}

// Memory is deterministic: the same run twice has the same peaks, byte for byte.
TEST(RuntimeMemory, PeaksRepeatExactly) {
  const std::string flags = "--model tiny --nproc 2 --pp 2 --microbatches 4 --steps 2 --schedule zb-h1";
  TrainRun a = train(flags), b = train(flags);
  ASSERT_EQ(a.cli.exit_code, 0) << a.cli.err;
  ASSERT_EQ(b.cli.exit_code, 0) << b.cli.err;
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(a.summary["ranks"][i]["peak_memory_bytes"], b.summary["ranks"][i]["peak_memory_bytes"]) << "rank " << i;
}

}  // namespace
}  // namespace stagecraft::test
