// stagecraft: one program, subcommands. Exit codes: 0 success, 1 failure at run time,
// 2 bad input (the message names the field, the value and what is allowed).
#include <CLI/CLI.hpp>
#include <iostream>
#ifdef __GLIBC__  // defined by the headers above
#include <malloc.h>
#endif

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/flag_bounds.h"
#include "schedules/error.h"

namespace {

// glibc's allocator returns freed memory to the system as soon as the top of a heap is free, and
// its threads' arenas (the planner's --threads, the simulator's) shrink and grow again for each
// evaluator compiled: every regrowth page-faults. Kept instead (mallopt(3): a fixed mmap
// threshold of 32 MiB, the largest glibc allows for thread arenas, trimming only past 1 GiB,
// 256 MiB asked of the system at a time), the DeepSeek-V3 search's page faults fall by 40% and
// two threads stop costing more CPU time than one (docs/benchmarks.md, issue 53).
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"stagecraft: simulate, run and compare pipeline and 3D-parallel training schedules"};
  app.formatter(std::make_shared<stagecraft::cli::WrappingFormatter>());  // before the subcommands: they inherit it
  app.require_subcommand(1);
  app.set_version_flag("--version", "stagecraft 0.1.0");
  stagecraft::cli::add_presets_command(app);
  stagecraft::cli::add_schedule_command(app);
  stagecraft::cli::add_estimate_command(app);
  stagecraft::cli::add_compare_command(app);
  stagecraft::cli::add_plan_command(app);
  stagecraft::cli::add_experiment_command(app);
  stagecraft::cli::add_partition_command(app);
  stagecraft::cli::add_import_command(app);
  stagecraft::cli::add_check_run_command(app);
#ifdef STAGECRAFT_HAVE_SIM
  stagecraft::cli::add_simulate_command(app);
#endif
  try {
#ifdef STAGECRAFT_WITH_RUNTIME
    // The runtime's commands: flags here, work in the plugin, loaded when one runs.
    stagecraft::cli::add_train_command(app, argc, argv);
    stagecraft::cli::add_profile_command(app, argc, argv);
    stagecraft::cli::add_validate_command(app);
#endif
    stagecraft::cli::bound_numeric_flags(app);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit code (train's ranks)
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {  // a flag's value or a missing flag: one line, as every input error
    std::cerr << "stagecraft: error: " << e.what() << " (--help lists the flags)\n";
    return 2;
  } catch (const std::exception& e) {  // InputError: 2; any other failure: 1
    return stagecraft::cli::report_exception(e);
  }
  return 0;
}
