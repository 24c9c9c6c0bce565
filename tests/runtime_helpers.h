// Helpers of the runtime tests: run `stagecraft train` and read its JSON summary.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
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

// `train ARGS`, run once per ARGS in this test program: a reference several tests compare with.
inline const TrainRun& train_once(const std::string& args) {
  static std::map<std::string, TrainRun> cache;
  auto it = cache.find(args);
  if (it == cache.end()) {
    it = cache.emplace(args, train(args)).first;
    EXPECT_EQ(it->second.cli.exit_code, 0) << args << "\n" << it->second.cli.err;
  }
  return it->second;
}

// `train ARGS` is refused before any rank starts: exit 2, the message naming `want`.
inline void expect_train_refused(const std::string& args, const std::string& want) {
  TrainRun r = train(args);
  EXPECT_EQ(r.cli.exit_code, 2) << args << "\n" << r.cli.err;
  EXPECT_NE(r.cli.err.find(want), std::string::npos) << args << "\n" << r.cli.err;
}

inline std::vector<double> losses(const nlohmann::json& summary) {
  std::vector<double> out;
  for (const auto& s : summary["steps"]) out.push_back(s["loss"].get<double>());
  return out;
}

// `train FLAGS` for 2 steps saved to `dir`, then resumed from it for 2 more, gives the losses of
// 4 uninterrupted steps exactly; `full_losses`: where to put those 4 losses.
inline void expect_resume_continues(const std::string& flags, const std::string& dir, std::vector<double>* full_losses = nullptr) {
  TrainRun full = train(flags + " --steps 4");
  ASSERT_EQ(full.cli.exit_code, 0) << full.cli.err;
  TrainRun first = train(flags + " --steps 2 --save " + dir);
  ASSERT_EQ(first.cli.exit_code, 0) << first.cli.err;
  TrainRun second = train(flags + " --steps 2 --resume " + dir);
  ASSERT_EQ(second.cli.exit_code, 0) << second.cli.err;
  const std::vector<double> all = losses(full.summary), a = losses(first.summary), b = losses(second.summary);
  ASSERT_EQ(all.size(), 4u);
  if (full_losses) *full_losses = all;
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i], all[i]) << flags << ": step " << i;
    EXPECT_EQ(b[i], all[i + 2]) << flags << ": step " << i + 2 << " after resuming";
  }
}

}  // namespace stagecraft::test
