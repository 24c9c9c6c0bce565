// What a plan search varies, read from a SearchRequest's text: the planner's space
// (planner/space.h) and the GPU counts of a sweep.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "planner/space.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

// The planner's space for `gpus` GPUs (0: the cluster's) and `global_batch` sequences, of the
// request's knobs; InputError naming the flag of a value it cannot read.
planner::PlanSpace space_of(const SearchRequest& q, long global_batch, int gpus);

// --gpus: "" (the whole cluster: no counts), counts "64,128", doubling ranges "64-512" (64, 128,
// 256, 512), or "auto": the whole cluster and its halvings down to one node, whole nodes each,
// so that a sweep shows whether fewer GPUs train more tokens per GPU-hour.
std::vector<int> gpu_counts(const std::string& text, const costmodel::ClusterSpec& c);

}  // namespace stagecraft::workbench
