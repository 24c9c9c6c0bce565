// `compare`'s rows: one configuration under several schedules and tensor-parallel overlap modes,
// one plan per (schedule, mode), each priced by the route and engine of workbench/route.h.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::workbench {

struct CompareRow {
  std::string schedule;                                        // the row's schedule
  schedules::TpOverlap mode = schedules::TpOverlap::Blocking;  // its tp overlap mode, on every stage
  std::string label;                // the schedule's name, with the mode when several are compared
  costmodel::ParallelPlan plan;     // the configuration's plan with the two, and the schedule
                                    // parameters the schedule reads
};

// `schedule_spec` (--schedules: a comma-separated list or "all") times `overlap_spec`
// (--tp-overlaps: a list, or empty: the plan's own mode), schedule-major; InputError naming the
// flag of an unknown or empty list, or of a mode that needs tp above 1.
std::vector<CompareRow> compare_rows(const std::string& schedule_spec, const std::string& overlap_spec, const costmodel::ParallelPlan& plan);

}  // namespace stagecraft::workbench
