// Helpers of the runtime tests: run `stagecraft train` and read its JSON summary.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/helpers.h"

namespace stagecraft::test {

inline std::string temp_path(const std::string& name) {
  static int counter = 0;
  return scratch_path("rt_" + std::to_string(counter++) + "_" + name);
}

struct TrainRun {
  RunResult cli;           // exit code and output
  nlohmann::json summary;  // the --json file (null when the run failed)
};

// Runs `stagecraft train ARGS --json TMP` and parses the summary.
inline TrainRun train(const std::string& args) {
  TrainRun r;
  std::string json_path = temp_path("summary.json");
  r.cli = run_cli("train " + args + " --log-every 0 --json " + json_path);
  if (r.cli.exit_code == 0) r.summary = nlohmann::json::parse(read_text(json_path));
  std::remove(json_path.c_str());
  return r;
}

inline std::vector<double> losses(const nlohmann::json& summary) {
  std::vector<double> out;
  for (const auto& s : summary["steps"]) out.push_back(s["loss"].get<double>());
  return out;
}

}  // namespace stagecraft::test
