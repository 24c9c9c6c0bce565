// One function per subcommand: each adds its options to the app and sets a callback that
// does the work by calling the libraries.
#pragma once

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

void add_presets_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_estimate_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_experiment_command(CLI::App& app);
void add_partition_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_check_run_command(CLI::App& app);
#ifdef STAGECRAFT_HAVE_SIM
void add_simulate_command(CLI::App& app);  // only when built with STAGECRAFT_BUILD_SIM
#endif
#ifdef STAGECRAFT_WITH_RUNTIME
// argv: the whole command line, which --nproc re-executes once per rank.
void add_train_command(CLI::App& app, int argc, char** argv);
void add_profile_command(CLI::App& app, int argc, char** argv);
void add_validate_command(CLI::App& app);
#endif

}  // namespace stagecraft::cli
