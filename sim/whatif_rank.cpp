#include "sim/whatif_rank.h"

#include <algorithm>

#include "schedules/error.h"
#include "sim/simulate.h"

namespace stagecraft::sim {

std::vector<RobustRow> rank_under_whatif(const std::vector<costmodel::Estimate>& plans, const WhatIf& w, const SimOptions& opt) {
  std::vector<RobustRow> rows;
  for (size_t i = 0; i < plans.size(); ++i) {
    RobustRow row;
    row.index = i;
    try {
      const WhatIfResult r = simulate_whatif(plans[i], w, opt, /*with_nominal=*/true);
      row.nominal_s = r.nominal_s;
      row.whatif_s = r.ranking_s(w.jitter.dist != JitterDist::None);
    } catch (const InputError& e) {
      const std::string what = e.what();
      row.applies = false;
      row.why = what.substr(0, what.find('\n'));
    }
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const RobustRow& a, const RobustRow& b) {
    if (a.applies != b.applies) return a.applies;
    return a.applies && a.whatif_s < b.whatif_s;
  });
  return rows;
}

}  // namespace stagecraft::sim
