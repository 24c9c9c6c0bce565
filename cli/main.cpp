// stagecraft: one program, subcommands. Exit codes: 0 success, 1 failure at run time,
// 2 bad input (the message names the field, the value and what is allowed).
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.h"
#include "cli/runtime_plugin.h"
#include "schedules/error.h"

int main(int argc, char** argv) {
  CLI::App app{"stagecraft: simulate, run and compare pipeline and 3D-parallel training schedules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stagecraft 0.1.0");
  stagecraft::cli::add_presets_command(app);
  stagecraft::cli::add_schedule_command(app);
  stagecraft::cli::add_estimate_command(app);
  stagecraft::cli::add_compare_command(app);
  stagecraft::cli::add_plan_command(app);
  stagecraft::cli::add_experiment_command(app);
  stagecraft::cli::add_partition_command(app);
#ifdef STAGECRAFT_HAVE_SIM
  stagecraft::cli::add_simulate_command(app);
#endif
  try {
#ifdef STAGECRAFT_WITH_RUNTIME
    // The runtime's commands come from its plugin, loaded only when one is named; otherwise they
    // are listed (for --help) without loading LibTorch.
    if (argc > 1 && stagecraft::cli::is_runtime_command(argv[1]))
      stagecraft::cli::runtime_plugin().add_commands(app, argc, argv);
    else
      for (const auto& c : stagecraft::cli::kRuntimeCommands) app.add_subcommand(c.name, c.description);
#endif
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit code (train's ranks)
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const stagecraft::InputError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return 2;
  } catch (const stagecraft::Error& e) {
    std::cerr << "stagecraft: failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "stagecraft: failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
