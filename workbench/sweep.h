// A GPU-count sweep (`plan --gpus 64,128,256`, `--gpus auto`): one search per count of the same
// space, the best plan of each with its rates, and which count trains most cheaply.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "planner/search.h"
#include "workbench/request.h"
#include "workbench/search.h"

namespace stagecraft::workbench {

struct SweepRow {
  int gpus = 0;                            // GPUs of this search
  std::optional<planner::Candidate> best;  // its best plan (a tight one where none fits); none: no plan
  double tokens_per_gpu_hour = 0;          // best's tokens per second * 3600 / gpus
  double train_s = 0;                      // time to train --tokens with it (0 without --tokens)
  double gpu_hours = 0;                    // gpus * train_s / 3600
  double search_s = 0;                     // the search's own seconds
};

// A progress callback for the search on `gpus` GPUs (each search its own rate and time left);
// empty: none.
using ProgressFor = std::function<ProgressFn(int gpus)>;

// One search per count of in.counts, in their order, each keeping its best plan (top 1).
std::vector<SweepRow> sweep(const SearchInputs& in, const SearchRequest& q, const ProgressFor& progress = {});

// Where scaling stops paying: the count with the most tokens per GPU-hour and the fastest one.
struct SweepChoice {
  int cheapest_gpus = -1;             // most tokens per GPU-hour; -1: no count has a plan
  double tokens_per_gpu_hour = 0;     // its tokens per GPU-hour
  int fastest_gpus = -1;              // most tokens per second
  double tokens_per_s = 0;            // its tokens per second
};
// The first count of each kind where several tie.
SweepChoice sweep_choice(const std::vector<SweepRow>& rows);

}  // namespace stagecraft::workbench
