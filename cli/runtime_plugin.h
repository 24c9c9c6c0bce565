// The runtime's subcommands (train, profile, validate) and TorchScript import live in a plugin,
// bin/stagecraft-runtime.so, which alone links LibTorch; the `stagecraft` program loads it only
// when a command needs it, so every other subcommand starts without loading LibTorch
// (docs/architecture.md, "The CLI and its runtime plugin").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/graph.h"

namespace stagecraft::cli {

// The subcommands the plugin adds, with their one-line descriptions: `stagecraft --help` lists
// them without loading the plugin, and the plugin registers them under the same text.
struct RuntimeCommand {
  const char* name;
  const char* description;
};
inline constexpr RuntimeCommand kRuntimeCommands[] = {
    {"train", "train a GPT model or a TorchScript module for real with the LibTorch runtime (Gloo on CPU, NCCL on GPUs)"},
    {"profile", "measure layer and collective times on this machine into a profile"},
    {"validate", "predicted against measured iteration times over a sweep of configurations"},
};
bool is_runtime_command(const std::string& name);
const char* runtime_command_description(const std::string& name);

// What the plugin exports, under the C name "stagecraft_runtime_plugin". Both sides are built
// from this header by the same build, so C++ types cross the boundary.
struct RuntimePluginApi {
  int version;  // kRuntimePluginVersion of the build that made the plugin
  // Adds train, profile and validate to app; argv is the whole command line (ranks re-execute it).
  void (*add_commands)(CLI::App& app, int argc, char** argv);
  // A TorchScript module as a graph (runtime/torchscript_graph.h); measure: time its subgraphs here.
  graphs::Graph (*import_torchscript)(const std::string& path, const std::vector<std::vector<std::int64_t>>& example_shapes,
                                      bool measure);
};
inline constexpr int kRuntimePluginVersion = 1;

// The plugin beside this program (loaded once, kept loaded). Throws Error naming the file and the
// loader's message when it is missing or does not load.
const RuntimePluginApi& runtime_plugin();

}  // namespace stagecraft::cli
