// Training works: the tiny model learns the synthetic data (loss well below its start in a
// few hundred steps), the run is deterministic per seed, and the summary has its fields.
#include <chrono>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

TEST(RuntimeTrain, TinyModelLearnsTheSyntheticData) {
  TrainRun r = train("--model tiny --microbatches 2 --steps 200 --lr 3e-3 --seed 11");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  std::vector<double> l = losses(r.summary);
  ASSERT_EQ(l.size(), 200u);
  EXPECT_NEAR(l.front(), std::log(256.0), 0.5);  // starts near uniform over the vocabulary
  EXPECT_LT(l.back(), 0.4 * l.front()) << "first " << l.front() << " last " << l.back();
}

TEST(RuntimeTrain, SameSeedSameLossesOtherSeedOther) {
  auto run = [](int seed) {
    TrainRun r = train("--model tiny --nproc 2 --pp 2 --microbatches 4 --steps 3 --seed " + std::to_string(seed));
    EXPECT_EQ(r.cli.exit_code, 0) << r.cli.err;
    return r.cli.exit_code == 0 ? losses(r.summary) : std::vector<double>{};
  };
  std::vector<double> a = run(5), b = run(5), c = run(6);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(RuntimeTrain, SummaryHasPerRankTimesAndMemory) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainRun r = train("--model tiny --nproc 2 --pp 2 --microbatches 4 --steps 3");
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  const auto& s = r.summary;
  ASSERT_EQ(s["ranks"].size(), 2u);
  for (const auto& rk : s["ranks"]) {
    EXPECT_GT(rk["compute_s"].get<double>(), 0);
    EXPECT_GE(rk["idle_s"].get<double>(), 0);
    EXPECT_GE(rk["communication_s"].get<double>(), 0);
    EXPECT_GT(rk["peak_memory_bytes"].get<double>(), 1e6);
    EXPECT_LE(rk["compute_s"].get<double>(), rk["iteration_time_s"].get<double>() * 1.01);
  }
  // Each step measured, and all three within the wall time of the whole command (the test's clock).
  double steps_s = 0;
  for (const auto& st : s["steps"]) {
    EXPECT_GT(st["iteration_time_s"].get<double>(), 0);
    steps_s += st["iteration_time_s"].get<double>();
  }
  EXPECT_LT(steps_s, wall_s);
  // The run ends with one line of its result (issue 36), even when it logs no step (--log-every 0).
  EXPECT_NE(r.cli.out.find("trained 3 steps on 2 ranks (dp 1, tp 1, pp 2, 1f1b): final loss"), std::string::npos) << r.cli.out;
  EXPECT_NE(r.cli.out.find("tokens/s, peak memory"), std::string::npos) << r.cli.out;
}


// A plan searched for the runtime (`plan --for-runtime`) trains unchanged with `train --plan`
// (issue 36): the planner searched only what the runtime runs (runtime/support/rules.h).
TEST(RuntimeTrain, APlanForTheRuntimeTrains) {
  const std::string plan = temp_path("plan.json");
  const RunResult p = run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --sequence-parallel off,on "
                              "--zero 0,1,2,3 --for-runtime --quiet --out " + plan);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(plan));
  const nlohmann::json& q = j.contains("plan") ? j["plan"] : j;
  EXPECT_FALSE(q.value("sequence_parallel", false)) << q.dump();
  EXPECT_LT(q.value("zero", 0), 3) << q.dump();
  TrainRun r = train("--plan " + plan + " --model tiny --steps 2");
  EXPECT_EQ(r.cli.exit_code, 0) << r.cli.err;
  std::remove(plan.c_str());
}

}  // namespace
}  // namespace stagecraft::test
