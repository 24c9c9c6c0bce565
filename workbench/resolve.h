// A request resolved: the model (or graph), the cluster and the plan it names, loaded and
// checked, ready for an engine (workbench/route.h). Every error an InputError naming the flag.
#pragma once

#include <optional>

#include "costmodel/profile.h"
#include "costmodel/specs.h"
#include "graphs/graph.h"
#include "workbench/from.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

struct Inputs {
  costmodel::ModelSpec model;          // the graph's stand-in (graphs::model_of) with a graph
  std::optional<graphs::Graph> graph;  // --model FILE.json with "format": "stagecraft-graph"
  costmodel::ClusterSpec cluster;
  costmodel::ParallelPlan plan;
  std::optional<costmodel::Profile> profile;  // from --profile
  const costmodel::Profile* profile_ptr() const { return profile ? &*profile : nullptr; }
};

// Loads presets or files and builds the plan; throws InputError naming the flag. With --from, the
// imported model (unless --model), nodes (unless --nodes) and plan (under the request's fields),
// the file's unknown fields warned about through `warn`.
Inputs resolve(const PlanRequest& r, const WarnFn& warn = {});

// --memory-margin: sets the cluster's margin when given; InputError naming the flag when outside
// [0, 1).
void apply_memory_margin(costmodel::ClusterSpec& c, const std::optional<double>& margin);
// --nodes N: the same cluster with N nodes (a preset scaled out or in, node and network figures
// unchanged; the name says so). InputError naming the flag when N < 1.
void apply_nodes(costmodel::ClusterSpec& c, const std::optional<int>& nodes);

}  // namespace stagecraft::workbench
