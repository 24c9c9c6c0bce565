// One function per subcommand: each adds its options to the app and sets a callback that
// does the work by calling the libraries.
#pragma once

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

void add_presets_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_estimate_command(CLI::App& app);
void add_compare_command(CLI::App& app);

}  // namespace stagecraft::cli
