// plan --layer-tp: Oases' per-layer tensor-parallel degrees (planner/layer_tp.h, an ILP) for each
// of a search's top plans its formulation covers (pp = 1, tp >= 2, no FSDP or cp), with the
// uniform degree's value under the same model beside it.
#pragma once

#include <vector>

#include "costmodel/profile.h"
#include "planner/layer_tp.h"
#include "planner/search.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

struct LayerTpRow {
  size_t rank = 0;                     // index in the top plans
  planner::LayerTpBreakdown uniform;   // every layer at the plan's tp
  planner::LayerTpSolution best;       // the ILP's choice
};

// One row per plan of r.best the formulation covers, in r.best's order; empty unless the request
// asks (--layer-tp). `profile`: measured costs, or null for the analytic ones.
std::vector<LayerTpRow> plan_layer_tp(const SearchRequest& q, const costmodel::ModelSpec& m, const planner::SearchResult& r,
                                      const costmodel::Profile* profile);

}  // namespace stagecraft::workbench
