#include "workbench/compare.h"

#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"
#include "workbench/plan.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

namespace {

std::vector<std::string> schedule_list(const std::string& spec) {
  std::vector<std::string> names;
  if (spec == "all") {
    for (const auto& g : schedules::generators()) names.push_back(g.name);
    return names;
  }
  for (const std::string& n : split_list(spec)) names.push_back(schedules::find_generator(n).name);  // unknown: exit 2
  if (names.empty()) throw InputError("--schedules is empty (give a comma-separated list or 'all')");
  return names;
}

// The tp overlap modes of the rows: --tp-overlaps, or the plan's own mode.
std::vector<schedules::TpOverlap> overlap_list(const std::string& spec, const costmodel::ParallelPlan& plan) {
  if (spec.empty()) return {plan.tp_overlap};
  std::vector<schedules::TpOverlap> modes;
  for (const std::string& n : split_list(spec)) modes.push_back(schedules::parse_tp_overlap(n, "--tp-overlaps"));
  if (modes.empty()) throw InputError("--tp-overlaps is empty (give a comma-separated list of blocking, merak, cross-pass, oases, te)");
  for (schedules::TpOverlap m : modes)
    if (!costmodel::tp_overlap_applies(m, plan.tp))
      throw InputError("--tp-overlaps = '" + spec + "' is invalid with tp = " + std::to_string(plan.tp) + ": '" +
                       std::string(schedules::tp_overlap_name(m)) +
                       "' overlaps tensor-parallel collectives, and tp = 1 has none (allowed: blocking, or --tp above 1)");
  return modes;
}

}  // namespace

std::vector<CompareRow> compare_rows(const std::string& schedule_spec, const std::string& overlap_spec, const costmodel::ParallelPlan& plan) {
  std::vector<CompareRow> rows;
  const auto modes = overlap_list(overlap_spec, plan);
  for (const std::string& name : schedule_list(schedule_spec))
    for (schedules::TpOverlap m : modes) {
      CompareRow row{name, m, modes.size() > 1 ? name + "." + std::string(schedules::tp_overlap_name(m)) : name, plan};
      row.plan.schedule = name;
      row.plan.schedule_params = params_for(name, plan.schedule_params);
      row.plan.tp_overlap = m;
      row.plan.stage_tp_overlap.clear();  // the row's mode applies to every stage
      rows.push_back(row);
    }
  return rows;
}

}  // namespace stagecraft::workbench
