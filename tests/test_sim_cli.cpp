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
  EXPECT_GT(j.at("iteration_time_s").get<double>(), 0);
  EXPECT_NEAR(j.at("iteration_time_s").get<double>(), j.at("evaluator_iteration_time_s").get<double>(),
              0.01 * j.at("evaluator_iteration_time_s").get<double>());
  const auto& s = j.at("simulation");
  for (const char* k : {"pipeline", "data_parallel", "tensor_parallel"}) EXPECT_EQ(s.at("exposed_comm_s").at(k).size(), 8u) << k;
  EXPECT_EQ(s.at("peak_memory_bytes").size(), 8u);
  EXPECT_GT(s.at("busiest_link").at("utilisation").get<double>(), 0);
  EXPECT_GT(s.at("activities").get<long>(), 0);
  EXPECT_GT(j.at("tokens_per_s").get<double>(), 0);
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
