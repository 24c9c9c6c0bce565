#include "workbench/from.h"

#include "configs/import.h"
#include "presets/load.h"
#include "schedules/error.h"

namespace stagecraft::workbench {

namespace {

// The cluster with the nodes a world of `world` GPUs fills (one node when fewer).
void nodes_for_world(costmodel::ClusterSpec& c, int world, const std::string& from) {
  const int per = c.gpus_per_node;
  if (world % per != 0 && world > per)
    throw InputError("--from " + from + ": world size " + std::to_string(world) + " is not a multiple of cluster '" + c.name + "''s " +
                     std::to_string(per) + " GPUs per node (contradictory values; give --nodes)");
  costmodel::set_nodes(c, world > per ? world / per : 1, "--from's world size");
}

}  // namespace

FromConfig import_from(const PlanRequest& r, costmodel::ClusterSpec* cluster, int gpus, const WarnFn& warn) {
  FromConfig out;
  if (r.from.empty()) return out;
  if (!r.plan_file.empty()) throw InputError("--plan " + r.plan_file + " with --from " + r.from + " (allowed: one of them)");
  configs::ImportOptions o;
  o.hf_config = r.hf_config;
  std::optional<configs::Format> fmt;
  if (!r.from_format.empty()) fmt = configs::parse_format(r.from_format, "--from-format");
  configs::Imported in = configs::import_file(r.from, fmt, o);
  for (const configs::ReportEntry& u : in.report.unknown)
    if (warn) warn("--from " + r.from + ": unknown field " + u.field + " (not understood; left out)");
  out.model = in.model;
  if (!in.has_plan) return out;
  if (cluster && !r.nodes && in.world_size > 0) nodes_for_world(*cluster, in.world_size, r.from);
  if (in.plan.dp < 1 || in.world_size == 0 || in.plan.num_microbatches < 1)
    configs::complete_plan(in, gpus > 0 ? gpus : cluster ? cluster->num_gpus() : 0, "--nodes or --cluster");
  out.plan = in.plan;
  out.global_batch = in.global_batch > 0 ? in.global_batch : 0;
  out.world = in.world_size;
  return out;
}

}  // namespace stagecraft::workbench
