// `stagecraft simulate` and `stagecraft compare --engine sim`: exit codes and JSON fields.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "helpers.h"

namespace stagecraft {
namespace {

using test::run_cli;

const std::string kConfig = "--model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 8 --pp 8 --dp 1 --microbatches 8 ";

TEST(SimCli, JsonHasTheSimulatedFigures) {
  auto r = run_cli("simulate " + kConfig + "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("engine"), "sim");
  // The evaluator's time is `estimate`'s for the same configuration; the simulated one within 1%.
  auto est = run_cli("estimate " + kConfig + "--json");
  ASSERT_EQ(est.exit_code, 0) << est.err;
  const double T = j.at("iteration_time_s").get<double>();
  EXPECT_DOUBLE_EQ(j.at("evaluator_iteration_time_s").get<double>(), nlohmann::json::parse(est.out).at("iteration_time_s").get<double>());
  EXPECT_NEAR(T, j.at("evaluator_iteration_time_s").get<double>(), 0.01 * j.at("evaluator_iteration_time_s").get<double>());
  const auto& s = j.at("simulation");
  for (const char* k : {"pipeline", "data_parallel", "tensor_parallel"}) EXPECT_EQ(s.at("exposed_comm_s").at(k).size(), 8u) << k;
  EXPECT_EQ(s.at("peak_memory_bytes").size(), 8u);
  // The busiest link by hand: a node's NVSwitch (8 ports of 450 GB/s x 0.82) under a middle stage
  // of 5 of the 36 layers, carrying its tp all-reduces (explicit by default): 8 microbatches x
  // (F + B) x 2 per layer x 8 GPUs x 2(n-1)/n of (s, h) at 16 bits; utilisation its bytes over
  // bandwidth x iteration time.
  const auto& busiest = s.at("busiest_link");
  const double bytes = 8 * 2 * 2 * 5 * 8 * 14.0 / 8 * 2048 * 4096 * 2;
  EXPECT_DOUBLE_EQ(busiest.at("bandwidth_Bps").get<double>(), 8 * 450e9 * 0.82);
  EXPECT_NEAR(busiest.at("bytes").get<double>(), bytes, 1e-9 * bytes);
  EXPECT_NEAR(busiest.at("utilisation").get<double>(), bytes / (8 * 450e9 * 0.82 * T), 1e-9);
  // At least one activity for each of the 16 compute actions of each of the 8 pipeline ranks in
  // each iteration reported.
  EXPECT_GE(s.at("activities").get<long>(), 8 * 16 * static_cast<long>(s.at("iteration_times_s").size()));
  EXPECT_NEAR(j.at("tokens_per_s").get<double>(), 8 * 2048 / T, 1e-9 * 8 * 2048 / T);  // 8 samples of 2048 tokens
}

TEST(SimCli, TableAndTrace) {
  std::string trace = stagecraft::test::scratch_path("sim_trace.json");
  auto r = run_cli("simulate " + kConfig + "--tp-comm explicit --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("busiest link"), std::string::npos);
  EXPECT_NE(r.out.find("exposed tensor-parallel comm"), std::string::npos);
  auto t = nlohmann::json::parse(test::read_text(trace));
  bool network = false, compute = false;
  for (const auto& e : t.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    if (e.at("pid") == 8) network = true;
    if (e.at("pid") == 0 && e.at("tid") == 0) compute = true;
  }
  EXPECT_TRUE(network);
  EXPECT_TRUE(compute);
  std::remove(trace.c_str());
}

TEST(SimCli, BadInputExitsTwo) {
  EXPECT_EQ(run_cli("simulate " + kConfig + "--tp-comm sideways").exit_code, 2);
  auto r = run_cli("simulate " + kConfig + "--platform " + test::data_path("sim/two_gpus.xml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("stagecraft_gpu"), std::string::npos) << r.err;
}

TEST(SimCli, CompareWithTheSimulatorEngine) {
  auto r = run_cli("compare " + kConfig + "--schedules 1f1b,gpipe --engine sim --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  for (const auto& e : j) EXPECT_EQ(e.at("engine"), "sim");
  EXPECT_EQ(run_cli("compare " + kConfig + "--engine warp").exit_code, 2);
}

}  // namespace
}  // namespace stagecraft
