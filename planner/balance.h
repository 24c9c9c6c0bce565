// Stage balancing (Merak Sec. 4 / AutoPipe-style): contiguous layers per pipeline stage chosen
// so that the slowest stage is as fast as possible, given that the first stage also runs the
// embedding and the last the LM head and loss; uniform partitions let those two set the pace.
#pragma once

#include <vector>

#include "costmodel/costs.h"

namespace stagecraft::planner {

// The time one microbatch spends in a stage of k layers: k * layer_s, plus embed_s on the
// first stage and head_s on the last (forward, backward and recomputation together).
struct StageTimeModel {
  double layer_s = 0;  // one transformer layer
  double embed_s = 0;  // the embedding (first stage)
  double head_s = 0;   // the LM head and loss (last stage)
  double stage_s(int k, bool first, bool last) const { return k * layer_s + (first ? embed_s : 0) + (last ? head_s : 0); }
};

// The per-layer, embedding and head times of a cost table's pieces (costmodel/inner.h): the
// blocks' forward, input and weight gradients, recomputation when the plan recomputes, and the
// tensor-parallel collectives folded into the stage, per layer.
StageTimeModel stage_time_model(const costmodel::CostTable& t, bool full_recompute);

// Layers per stage (each at least 1, adding up to `layers`) minimising the largest
// stage_s over the `stages` stages: exact, by dynamic programming over (stages used, layers
// used), O(stages * layers^2); among the partitions with that bottleneck, the one with the
// least sum of squared stage times (a second program capped at the bottleneck), since a
// pipeline's fill and drain add every stage. Throws InputError when there are fewer layers
// than stages.
std::vector<int> balance_stages(int layers, int stages, const StageTimeModel& m);

// Items per stage for a sequence of items of any times (Merak's subgraph sequence, graphs/
// shard.h), contiguous, each stage at least one: the smallest bottleneck, then the most even,
// by the same program. Throws InputError when there are fewer items than stages.
std::vector<int> balance_sequence(const std::vector<double>& item_s, int stages);

}  // namespace stagecraft::planner
