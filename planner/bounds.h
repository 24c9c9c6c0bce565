// Cheap bounds that prune the planner's space before any evaluation.
#pragma once

#include "costmodel/specs.h"

namespace stagecraft::planner {

// A lower bound on the largest per-GPU memory of plan p from its static memory alone: the
// rank holding the most parameters holds at least the average over the pp ranks of one
// pipeline (every layer, the embedding and the head, tp-split as costmodel/memory.h splits
// them) times the static bytes per parameter of the plan's ZeRO stage
// (memory::static_bytes_per_param), exactly as the cost table counts static memory.
// Activations only add to it, so a plan whose bound exceeds the GPU's memory cannot fit.
double memory_lower_bound_bytes(const costmodel::ModelSpec& m, const costmodel::ParallelPlan& p);

}  // namespace stagecraft::planner
