// The allowed range of every numeric flag of every subcommand, in one table (flag_bounds.cpp):
// a value outside it, NaN or infinity is refused while parsing (exit 2, one line naming the
// flag, the value and the range) before any work starts, and a numeric flag missing from the
// table is a build defect the program reports on every run (tests/test_cli_bounds.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

// Attaches the range check to every numeric option of app's subcommands (recursively). Throws
// Error naming the subcommand and the flag if a numeric option has no entry in the table.
void bound_numeric_flags(CLI::App& app);

// The range of a subcommand's numeric flag, for tests and messages; false when it has none.
struct FlagRange {
  double lo = 0, hi = 0;  // allowed, inclusive
  bool integer = false;   // whole numbers only
};
bool flag_range(const std::string& command, const std::string& flag, FlagRange& out);

}  // namespace stagecraft::cli
