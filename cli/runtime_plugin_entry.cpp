// The plugin's side (bin/stagecraft-runtime.so): the work of train, profile and validate, and
// TorchScript import, behind the one C entry point the program looks up (cli/runtime_plugin.h).
#include "cli/runtime_commands.h"
#include "cli/runtime_plugin.h"
#include "runtime/torchscript_graph.h"

namespace stagecraft::cli {
namespace {

graphs::Graph import_torchscript(const std::string& path, const std::vector<std::vector<std::int64_t>>& shapes, bool measure) {
  return measure ? runtime::import_torchscript_measured(path, shapes) : runtime::import_torchscript(path, shapes);
}

const RuntimePluginApi kApi{kRuntimePluginVersion, &run_train, &run_profile, &run_validate, &import_torchscript};

}  // namespace
}  // namespace stagecraft::cli

extern "C" __attribute__((visibility("default"))) const stagecraft::cli::RuntimePluginApi* stagecraft_runtime_plugin() {
  return &stagecraft::cli::kApi;
}
