#include "workbench/model.h"

#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/json_read.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

void apply_model_request(costmodel::ModelSpec& m, const ModelRequest& r) {
  if (!r.attention_kernel.empty()) m.attention_kernel = costmodel::parse_attention_kernel(r.attention_kernel, "--attention-kernel");
  if (r.no_dropout) m.dropout = false;
  if (r.fp8) m.fp8 = true;
  if (!r.fp8_recipe.empty()) {
    m.fp8 = true;
    m.fp8_recipe = costmodel::parse_fp8_recipe(r.fp8_recipe, "--fp8-recipe");
  }
  if (r.seq_length) m.seq_length = *r.seq_length;
  costmodel::check(m);
}

void refuse_model_request_for_graph(const std::string& model, const ModelRequest& r) {
  if (!r.any()) return;
  const char* flag = r.fp8                        ? "--fp8"
                     : !r.fp8_recipe.empty()      ? "--fp8-recipe"
                     : r.no_dropout               ? "--no-dropout"
                     : r.seq_length               ? "--seq-length"
                                                  : "--attention-kernel";
  throw InputError(std::string(flag) + " with a graph (--model " + model +
                   "): the graph's nodes say what they compute and keep (saved_bytes)");
}

nlohmann::json plan_file_names(const PlanRequest& r, const std::string& key) {
  const nlohmann::json v = r.plan_file.empty() ? nlohmann::json(nullptr) : presets::plan_file_input(r.plan_file, key);
  if (v.is_null())
    throw InputError("--" + key + " is required (a preset name or a JSON file; or a --plan file written by `plan --out`, which " +
                     "names its " + key + ")" + (r.plan_file.empty() ? "" : "; plan file '" + r.plan_file + "' names none"));
  return v;
}

costmodel::ModelSpec named_model(const PlanRequest& r) {
  costmodel::ModelSpec m = named_spec(r.model, r, "model", &presets::load_model, &costmodel::model_from_json);
  apply_model_request(m, r.model_request);
  return m;
}

costmodel::ModelSpec model_of(const PlanRequest& r, const FromConfig& from) {
  if (r.model.empty() && from.model) {
    costmodel::ModelSpec m = *from.model;
    apply_model_request(m, r.model_request);
    return m;
  }
  if (r.model.empty() && !r.from.empty()) throw InputError("--from " + r.from + " defines no model; give --model or --hf-config");
  return named_model(r);  // --model, or the --plan file's
}

std::optional<graphs::Graph> graph_arg(const std::string& model_arg) {
  if (!ends_with(model_arg, ".json")) return std::nullopt;
  nlohmann::json j = schedules::read_json_file(model_arg, "--model");
  if (!j.is_object() || j.value("format", "") != "stagecraft-graph") return std::nullopt;
  return graphs::from_json(j, "graph '" + model_arg + "'");
}

}  // namespace stagecraft::workbench
