// Issue 52, the runtime's side: `train` refuses bad output paths before any rank starts (and
// leaves nothing half-written), refuses what estimate notes in the same words, and trains a plan
// file that names its own model.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "helpers.h"

using stagecraft::test::run_cli;
using stagecraft::test::scratch_path;

namespace {
// `text` with every run of white space as one space (a note wrapped onto several lines reads as one).
std::string squashed(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const bool space = ch == ' ' || ch == '\n';
    if (!(space && !out.empty() && out.back() == ' ')) out += space ? ' ' : ch;
  }
  return out;
}
}  // namespace

TEST(AnswersRuntime, TrainRefusesOutputPathsBeforeTraining) {
  const std::string dir = scratch_path("train_out_dir");
  std::filesystem::create_directories(dir);
  const std::string file = scratch_path("train_a_file");
  std::ofstream(file) << "x";
  const std::string cfg = "train --model tiny --nproc 2 --pp 2 --microbatches 4 --steps 2 --log-every 0";
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {cfg + " --trace " + dir, "--trace = '" + dir + "' is a directory"},
      {cfg + " --json " + dir, "--json = '" + dir + "' is a directory"},
      {cfg + " --save " + file, "--save = '" + file + "' is a file, not a folder"},
      {cfg + " --json " + file + "/x.json", "is not a directory"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out.find("step"), std::string::npos) << c.args << "\n" << r.out;  // nothing trained
  }
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(AnswersRuntime, TrainRefusesWhatEstimateNotesInTheSameWords) {
  const std::string plan = "--model tiny --pp 2 --microbatches 4 --zero 3 --schedule zb-h1";
  const auto e = run_cli("estimate --cluster local-cpu-2 --dp 1 " + plan);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const std::string words =
      "runtime: plan.zero = 3 is not supported with schedule 'zb-h1' (its W actions compute weight gradients after the "
      "layer's unit is released); allowed: schedules without a split backward";
  EXPECT_NE(squashed(e.out).find("`train` does not run this plan: " + words), std::string::npos) << e.out;
  const auto t = run_cli("train --nproc 4 --dp 2 --steps 1 " + plan);
  EXPECT_EQ(t.exit_code, 2) << t.err;
  EXPECT_NE(t.err.find(words), std::string::npos) << t.err;
}

TEST(AnswersRuntime, TrainPlanFileNeedsNoModelFlag) {
  const std::string out = scratch_path("train_plan.json");
  const auto p = run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --for-runtime --top 1 --quiet --out " + out);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto t = run_cli("train --plan " + out + " --steps 2 --log-every 0");
  EXPECT_EQ(t.exit_code, 0) << t.out << t.err;
}

// validate, interrupted: what it says is written is what is there (issue 52: it said "the rows
// completed so far are written" when no CSV existed). Whenever the signal lands, the message and
// the file agree.
TEST(AnswersRuntime, AnInterruptedValidateSaysWhatItWrote) {
  const std::string sweep = scratch_path("answers_sweep.json");
  std::ofstream(sweep) << R"({"format": "stagecraft-sweep", "cluster": "local-cpu-2", "steps": 3, "warmup": 1, "rounds": 1,
    "configs": [{"name": "a", "model": "tiny", "pp": 2, "num_microbatches": 4},
                {"name": "b", "model": "tiny", "pp": 2, "num_microbatches": 8},
                {"name": "c", "model": "tiny", "pp": 2, "num_microbatches": 4, "schedule": "gpipe"}]})";
  const std::string csv = scratch_path("answers_validation.csv"), err = scratch_path("answers_validate.err");
  const std::string cmd = std::string(STAGECRAFT_BIN) + " validate --sweep " + sweep + " --out " + csv + " --no-sim --quiet --work-dir " +
                          scratch_path("answers_work") + " > /dev/null 2> " + err + " & pid=$!; sleep 4; kill -TERM $pid; wait $pid";
  const int status = std::system(("bash -c '" + cmd + "'").c_str());
  const std::string said = stagecraft::test::read_text(err);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {  // it finished first: every row is there
    EXPECT_TRUE(std::filesystem::exists(csv));
    return;
  }
  if (said.find("interrupted") == std::string::npos && std::filesystem::exists(csv)) {
    // The signal came after the last row, while the program was exiting (the default action then):
    // every row is there and nothing claims otherwise.
    const std::string rows = stagecraft::test::read_text(csv);
    EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 4) << said << rows;  // the header and 3 rows
    return;
  }
  EXPECT_EQ(WEXITSTATUS(status), 1) << said;
  if (said.find("nothing written") != std::string::npos) {
    EXPECT_FALSE(std::filesystem::exists(csv)) << said;
  } else {
    const std::string rows = stagecraft::test::read_text(csv);
    const long lines = std::count(rows.begin(), rows.end(), '\n') - 1;  // less the header
    EXPECT_NE(said.find("validate: interrupted; the " + std::to_string(lines) + (lines == 1 ? " row completed is in " : " rows completed are in ") + csv),
              std::string::npos)
        << said << rows;
  }
}
