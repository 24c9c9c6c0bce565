// Rank-by-step text grid of a schedule: one row per rank, one column per position in the
// action list. Used by `stagecraft schedule --format grid` and by every validation error,
// which marks the failing cells with >>...<<.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

struct GridOptions {
  std::vector<std::pair<int, int>> marks;  // (rank, step) cells to mark as failing
  int window = 0;  // when > 0 and marks exist, show only this many steps either side of them
};

std::string format_grid(const Schedule& s, const GridOptions& opt = {});

}  // namespace stagecraft::schedules
