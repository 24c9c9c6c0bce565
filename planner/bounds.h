// Cheap bounds that prune the planner's space before any evaluation.
#pragma once

#include "costmodel/costs.h"
#include "costmodel/specs.h"
#include "schedules/schedule.h"

namespace stagecraft::planner {

// A lower bound on the largest per-GPU memory of plan p from its static memory alone
// (costmodel::memory::static_lower_bound_bytes, which `train` refuses by too): activations only
// add to it, so a plan whose bound exceeds the GPU's memory cannot fit.
double memory_lower_bound_bytes(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p);

// The share of the busiest rank's compute that the time bound below claims (a margin: the
// evaluator's iteration is the last of a few run back to back, measured end to end).
constexpr double kTimeBoundShare = 0.9;

// A lower bound on the iteration time the evaluator gives a lowered schedule under a cost
// table (branch and bound, planner/search.h): each rank's compute stream runs its F, B, I and W
// actions one after another, each taking its stage's f_s, b_s, i_s or w_s, so an iteration takes
// at least the busiest rank's sum of them (recomputation, overlapped pairs, the optimizer and
// every wait only add); kTimeBoundShare of it. From the table alone: no evaluator is compiled.
double iteration_time_lower_bound_s(const schedules::Schedule& lowered, const costmodel::CostTable& costs);

}  // namespace stagecraft::planner
