#include "workbench/resolve.h"

#include "costmodel/gpus.h"
#include "presets/load.h"
#include "graphs/estimate.h"
#include "schedules/json_read.h"
#include "workbench/model.h"
#include "workbench/plan.h"

namespace stagecraft::workbench {

namespace {

// The cluster as --cluster (else the --plan file) names it, with the calibration, margin, nodes
// and GPUs per node the request gives.
costmodel::ClusterSpec cluster_of(const PlanRequest& r) {
  costmodel::ClusterSpec c = named_spec(r.cluster, r, "cluster", &presets::load_cluster, &costmodel::cluster_from_json);
  if (!r.gpu_calibration.empty())
    costmodel::apply_gpu_calibration(c, schedules::read_json_file(r.gpu_calibration, "--gpu-calibration"), r.gpu_calibration);
  apply_memory_margin(c, r.memory_margin);
  apply_nodes(c, r.nodes);
  if (r.gpus_used_per_node) costmodel::set_gpus_used_per_node(c, *r.gpus_used_per_node, "--gpus-used-per-node");
  return c;
}

}  // namespace

Inputs resolve(const PlanRequest& given, const WarnFn& warn) {
  PlanRequest r = given;
  if (r.model.empty() && r.from.empty())  // a plan file's model named by preset or file: resolved as --model
    if (const nlohmann::json named = plan_file_names(r, "model"); named.is_string()) r.model = named.get<std::string>();
  Inputs in;
  in.graph = graph_arg(r.model);
  if (in.graph) refuse_model_request_for_graph(r.model, r.model_request);
  in.cluster = cluster_of(r);
  const FromConfig from = import_from(r, &in.cluster, 0, warn);
  in.model = in.graph ? graphs::model_of(*in.graph) : model_of(r, from);
  // The file's world, unless --nodes says how many GPUs the run has.
  const int gpus = from.plan && from.world > 0 && !r.nodes ? from.world : in.cluster.num_gpus();
  in.plan = resolve_plan(r, from, gpus, from.plan ? "GPUs of --from " + r.from : "GPUs of cluster '" + in.cluster.name + "'");
  if (!in.graph) costmodel::check_fit(in.model, in.cluster, in.plan);  // a graph: graphs::estimate_graph checks its own
  if (!r.profile.empty()) in.profile = costmodel::load_profile(r.profile);
  return in;
}

void apply_memory_margin(costmodel::ClusterSpec& c, const std::optional<double>& margin) {
  if (margin) costmodel::set_memory_margin(c, *margin, "--memory-margin");
}

void apply_nodes(costmodel::ClusterSpec& c, const std::optional<int>& nodes) {
  if (nodes) costmodel::set_nodes(c, *nodes, "--nodes");
}

}  // namespace stagecraft::workbench
