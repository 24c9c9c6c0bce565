// The one validator every schedule passes, generated or imported, compute-only or lowered:
// one F per (stage, microbatch), backward after forward, I before W, stage order respected,
// every send matched by a receive (lowered schedules), recompute, offload and reduction
// placed sensibly, and no deadlock in a unit-time dry run. A failure names the rule and
// prints the rank-by-step grid with the failing step marked.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

struct ValidationResult {
  bool ok = true;
  std::string reason;                      // first rule broken, with rank, step and action
  std::vector<std::pair<int, int>> marks;  // (rank, step) cells to mark in the grid
};

// Checks everything; never throws for a bad schedule (only for a malformed shape).
ValidationResult check_schedule(const Schedule& s);

// Throws ScheduleError (reason + marked grid) when check_schedule fails.
void validate(const Schedule& s);

// Unit-time dry run: every action takes one step; a rank waits when its next compute action
// needs data another rank has not sent yet (receives are posted without blocking, sends
// never block). Returns the step at which each action ran, per rank.
struct DryRunResult {
  bool deadlock = false;
  std::string reason;                      // on deadlock: which ranks wait on what
  std::vector<std::pair<int, int>> marks;  // on deadlock: (rank, step) of each waiting action
  int steps = 0;                           // makespan in steps
  std::vector<std::vector<int>> step_of;   // (rank, position) -> step; -1 if never ran
};
DryRunResult dry_run(const Schedule& s);

}  // namespace stagecraft::schedules
