// Models, clusters and plans as specs: a preset's name (presets/catalog.h) or the path of a JSON
// file. A name that is not a preset but ends in .json is read as a file. Above the cost model,
// whose specs they build.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::presets {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

std::vector<std::string> model_preset_names();
std::vector<std::string> cluster_preset_names();

// A preset name or the path of a JSON file; throws InputError listing the presets. A cluster's
// JSON may name a cluster preset in "extends": it takes that preset's fields and overrides them.
ModelSpec load_model(const std::string& name_or_path);
ClusterSpec load_cluster(const std::string& name_or_path);
ParallelPlan load_plan_file(const std::string& path);
// The inputs a plan file names beside the plan (`plan --out` writes them, issue 52): "model" (a
// model JSON object, or a preset name or file as --model takes) and "cluster" (a cluster JSON
// object or a preset name or file); null when the file does not name it. load_plan_file ignores
// both.
nlohmann::json plan_file_input(const std::string& path, const std::string& key);

}  // namespace stagecraft::presets
