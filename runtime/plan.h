// What a run executes, decided before any rank starts and without torch: the lowered
// schedule of the plan, the layers of each model part, and the checks that refuse what the
// executor cannot run.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "runtime/train.h"
#include "schedules/schedule.h"

namespace stagecraft::runtime {

struct RunPlan {
  schedules::Schedule schedule;      // lowered (SEND/RECV, REDUCE_GRAD, OPTIMIZER, R)
  std::vector<int> part_layers;      // (stages per chain) layers of each model part
  std::vector<int> part_first_layer; // (stages per chain) global index of each part's first layer
};

// Generates, lowers and checks the plan's schedule; throws InputError naming the op and the
// schedule when the executor cannot run it.
RunPlan make_run_plan(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p);

// Refuses (InputError) ops and schedule shapes the executor does not implement.
void check_executable(const schedules::Schedule& s);

// Which backend `auto` means here, and whether a named one is usable in this build and on
// this machine (defined in compat.cpp, the only place that knows the LibTorch build).
std::string resolve_backend(const std::string& requested);

}  // namespace stagecraft::runtime
