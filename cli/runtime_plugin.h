// The work of the runtime's subcommands (train, profile, validate) and TorchScript import live in
// a plugin, bin/stagecraft-runtime.so, which alone links LibTorch; the `stagecraft` program
// registers and checks their flags itself and loads the plugin only to run one, so no other
// subcommand, no --help and no refused flag loads LibTorch (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/runtime_commands.h"
#include "graphs/graph.h"

namespace stagecraft::cli {

// What the plugin exports, under the C name "stagecraft_runtime_plugin". Both sides are built
// from this header by the same build, so C++ types cross the boundary.
struct RuntimePluginApi {
  int version;  // kRuntimePluginVersion of the build that made the plugin
  // The commands' work (cli/runtime_commands.h); argv is the whole command line, which ranks
  // started by exec run again.
  int (*train)(const TrainFlags& f, const std::vector<std::string>& argv);  // the exit code
  void (*profile)(const ProfileOpts& o, int argc, char** argv);
  void (*validate)(const ValidateOpts& o);
  // A TorchScript module as a graph (runtime/torchscript_graph.h); measure: time its subgraphs here.
  graphs::Graph (*import_torchscript)(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
                                      bool measure);
};
inline constexpr int kRuntimePluginVersion = 3;

// The plugin beside this program (loaded once, kept loaded). Throws Error naming the file and the
// loader's message when it is missing or does not load.
const RuntimePluginApi& runtime_plugin();

}  // namespace stagecraft::cli
