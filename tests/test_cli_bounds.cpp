// Every numeric flag of every subcommand has a range (cli/flag_bounds.cpp), and a value below
// it, above it, NaN or (for whole-number flags) a fraction is refused while parsing: exit 2, the
// first line of standard error names the flag, the value and what is allowed, and nothing is
// printed on standard output (issue 36: no input makes the program crash, hang or allocate
// without bound before refusing).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flag_bounds.h"
#include "helpers.h"

namespace stagecraft {
namespace {

const char* kCommands[] = {"presets", "schedule", "estimate", "compare", "plan", "partition",
                           "simulate", "train", "profile", "validate", "import", "check-run"};

struct Flag {
  std::string command, name;
};

// The numeric options a subcommand's --help lists ("  --tp INT  ...").
std::vector<Flag> numeric_flags(const std::string& command) {
  const test::RunResult r = test::run_cli(command + " --help");
  EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
  std::vector<Flag> flags;
  static const std::regex line(R"(^\s+(--[a-z0-9-]+)\s+(INT|UINT|FLOAT|NUMBER)\b)");
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) flags.push_back({command, m[1]});
  }
  return flags;
}

std::string text(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// The subcommands this build has (simulate needs the simulator; train, profile and validate the
// runtime's plugin).
bool built(const std::string& command) {
  static const std::string help = test::run_cli("--help").out;
  return help.find("\n  " + command + " ") != std::string::npos;
}

// One refused value: exit 2, one line naming the flag, the value and the range, nothing printed.
void expect_refused(const std::string& command, const std::string& flag, const std::string& v) {
  const test::RunResult r = test::run_cli(command + " " + flag + " " + v);
  const std::string first = r.err.substr(0, r.err.find('\n'));
  const std::string what = command + " " + flag + " " + v + ": ";
  EXPECT_EQ(r.exit_code, 2) << what << r.err;
  EXPECT_NE(first.find(flag), std::string::npos) << what << first;
  EXPECT_NE(first.find("'" + v + "'"), std::string::npos) << what << first;
  EXPECT_NE(first.find("allowed: "), std::string::npos) << what << first;
  EXPECT_TRUE(r.out.empty()) << what << r.out;
}

// Every numeric flag of every subcommand refuses NaN (the check is attached everywhere); each
// range, at the first subcommand that has it, refuses infinity, a value below it, one above it
// and, for whole-number flags, a fraction.
TEST(CliBounds, EveryNumericFlagRefusesValuesOutsideItsRange) {
  int flags = 0;
  std::set<std::pair<std::string, std::string>> ranges_seen;  // (flag, range) checked at its ends
  for (const char* command : kCommands) {
    if (!built(command)) continue;
    for (const Flag& f : numeric_flags(command)) {
      cli::FlagRange range;
      ASSERT_TRUE(cli::flag_range(f.command, f.name, range)) << f.command << " " << f.name << " has no range";
      ++flags;
      expect_refused(command, f.name, "nan");
      if (!ranges_seen.insert({f.name, text(range.lo) + ".." + text(range.hi)}).second) continue;
      expect_refused(command, f.name, "inf");
      expect_refused(command, f.name, text(range.hi * 2 + 1));
      expect_refused(command, f.name, range.lo > 0 ? text(range.integer ? range.lo - 1 : range.lo / 2) : "-1");
      if (range.integer) expect_refused(command, f.name, text(range.lo + 0.5));
    }
  }
  EXPECT_GT(flags, built("train") ? 70 : 45);  // every subcommand's numeric flags (76 and 48 on 2026-11-27)
}

// The ends of a range are allowed: the program gets past the flag (and fails, if at all, on
// something else).
TEST(CliBounds, TheEndsOfARangeAreAllowed) {
  for (const char* v : {"1", "100"}) {
    const test::RunResult r = test::run_cli(std::string("simulate --iterations ") + v);
    EXPECT_EQ(r.err.find("--iterations"), std::string::npos) << v << ": " << r.err;
  }
  cli::FlagRange range;
  ASSERT_TRUE(cli::flag_range("simulate", "--iterations", range));
  EXPECT_EQ(range.lo, 1);
  EXPECT_EQ(range.hi, 100);
  ASSERT_TRUE(cli::flag_range("profile", "--nproc", range));  // 0 skips the collectives there
  EXPECT_EQ(range.lo, 0);
  ASSERT_TRUE(cli::flag_range("train", "--nproc", range));  // and is no rank count in train
  EXPECT_EQ(range.lo, 1);
}

}  // namespace
}  // namespace stagecraft
