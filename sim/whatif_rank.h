// Plans ranked by their time under a what-if (docs/whatif.md): what `plan --whatif` prints
// beside the nominal ranking, so that a user can pick the plan that degrades least when one node
// is slow, a NIC is degraded or kernels vary.
#pragma once

#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "sim/whatif.h"

namespace stagecraft::sim {

struct RobustRow {
  size_t index = 0;        // the plan's position in the list given
  bool applies = true;     // false: the what-if names a rank, node or NIC the plan does not have
  std::string why;         // the refusal's first line, when it does not apply
  double nominal_s = 0;    // the plan simulated without the what-if
  double whatif_s = 0;     // under it: p90 with jitter, else the median (WhatIfResult::ranking_s)
  double slowdown() const { return nominal_s > 0 ? whatif_s / nominal_s - 1 : 0; }
};

// Each plan simulated with and without the what-if (SimOptions as given, symmetry included),
// ordered by its time under the what-if, ties in the given order; plans it does not apply to
// come last, in the given order.
std::vector<RobustRow> rank_under_whatif(const std::vector<costmodel::Estimate>& plans, const WhatIf& w, const SimOptions& opt);

}  // namespace stagecraft::sim
