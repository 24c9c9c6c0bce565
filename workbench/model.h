// The model of a request: a preset or model JSON named by --model (or by the --plan file, or the
// --from file's model), the model flags applied and checked; or a graph JSON (docs/graphs.md).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "costmodel/specs.h"
#include "graphs/graph.h"
#include "workbench/from.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

// The model flags applied to a model, checked (costmodel::check); every command that takes them
// goes through here. InputError naming the flag.
void apply_model_request(costmodel::ModelSpec& m, const ModelRequest& r);
// With a graph model the flags are refused (its nodes say what they compute and keep), naming
// the flag; nothing when none is given.
void refuse_model_request_for_graph(const std::string& model, const ModelRequest& r);

// What the --plan file names for `key` ("model", "cluster") when the flag is not given: a preset
// name or the spec itself. InputError naming the flag when neither says.
nlohmann::json plan_file_names(const PlanRequest& r, const std::string& key);
// The spec `flag_value` names (a preset or a JSON file, through `load`), else the --plan file's
// for `key` (a name, through `load`, or the object itself, through `from_json`).
template <class Spec>
Spec named_spec(const std::string& flag_value, const PlanRequest& r, const std::string& key,
                Spec (*load)(const std::string&), Spec (*from_json)(const nlohmann::json&)) {
  if (!flag_value.empty()) return load(flag_value);
  const nlohmann::json v = plan_file_names(r, key);
  return v.is_string() ? load(v.get<std::string>()) : from_json(v);
}

// The model as --model names it (else the --plan file's), with the model flags applied.
costmodel::ModelSpec named_model(const PlanRequest& r);
// The model as --model names it, else --from's, else the --plan file's; InputError when none
// gives one.
costmodel::ModelSpec model_of(const PlanRequest& r, const FromConfig& from);

// The graph in `model_arg` when it names a graph JSON file (docs/graphs.md), else none.
std::optional<graphs::Graph> graph_arg(const std::string& model_arg);

}  // namespace stagecraft::workbench
