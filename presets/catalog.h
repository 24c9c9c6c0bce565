// The preset files (presets/models, clusters, stacks, gpus: one JSON file each, with its
// sources), compiled into the program so that it works from any directory (presets/embed.cmake).
// This is the data alone, below the cost model, which reads its GPU catalog and kernel stacks
// from here; presets/load.h turns model, cluster and plan files into specs.
#pragma once

#include <string>
#include <vector>

namespace stagecraft::presets {

struct Entry {
  std::string kind;   // "model", "cluster", "stack" or "gpu" (the folder)
  std::string name;   // the file name without .json
  std::string json;   // the file's text
};

// Every preset file, by kind then name.
const std::vector<Entry>& entries();
// The names of one kind's presets, in order.
std::vector<std::string> names(const std::string& kind);
// The preset of that kind and name; nullptr when there is none.
const Entry* find(const std::string& kind, const std::string& name);
// "a, b, c": a list of names for an error's "allowed" part.
std::string joined(const std::vector<std::string>& names);

}  // namespace stagecraft::presets
