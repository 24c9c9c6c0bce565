// SVG pictures of evaluated schedules, drawn like the papers' figures: one row per rank, a box
// per compute action coloured by op with the microbatch number in it, transfers as thin marks
// under the sender's row, reductions and host copies as thin bars above the row.
#pragma once

#include <string>
#include <vector>

#include "costmodel/evaluator.h"

namespace stagecraft::drawing {

using costmodel::EvalResult;
using costmodel::Span;
using costmodel::Stream;

struct SvgOptions {
  double width_px = 1100;    // width of the time axis
  double row_px = 24;        // height of one rank's row
  std::string time_unit;     // axis label unit: "" picks s, ms or us; "units" for unit costs
};

struct SvgPanel {
  std::string title;                       // shown above the panel
  const schedules::Schedule* schedule = nullptr;  // lowered schedule that was evaluated
  const EvalResult* result = nullptr;      // evaluated with EvalOptions::record
};

// One or more panels stacked on one time axis (the last evaluated iteration of each, from its
// first action). Throws InputError if a result has no recorded spans.
std::string schedule_svg(const std::vector<SvgPanel>& panels, const SvgOptions& opt = {});

}  // namespace stagecraft::drawing
