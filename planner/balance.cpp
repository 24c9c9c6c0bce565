#include "planner/balance.h"

#include <algorithm>
#include <limits>
#include <string>

#include "schedules/error.h"

namespace stagecraft::planner {

StageTimeModel stage_time_model(const costmodel::CostTable& t, bool full_recompute) {
  StageTimeModel out;
  if (t.stages.empty()) return out;
  for (const costmodel::StageCost& sc : t.stages) {
    const costmodel::InnerCosts& ic = sc.inner;
    if (sc.layers > 0 && out.layer_s == 0) {
      out.layer_s = ic.attn_f_s + ic.mlp_f_s + ic.attn_i_s + ic.mlp_i_s + ic.attn_w_s + ic.mlp_w_s +
                    (full_recompute ? ic.attn_r_s + ic.mlp_r_s : 0) + (sc.tp_comm_f_s * (full_recompute ? 2 : 1) + sc.tp_comm_i_s) / sc.layers;
    }
    out.embed_s = std::max(out.embed_s, ic.embed_f_s + ic.embed_b_s);
    out.head_s = std::max(out.head_s, ic.head_f_s + ic.head_i_s + ic.head_w_s);
  }
  return out;
}

std::vector<int> balance_stages(int layers, int stages, const StageTimeModel& m) {
  if (stages < 1 || layers < stages)
    throw InputError("stage balancing: " + std::to_string(layers) + " layers over " + std::to_string(stages) +
                     " stages is invalid (each stage needs at least one layer)");
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][l]: the smallest bottleneck of the first s stages holding the first l layers;
  // cut[s][l]: the layers of stage s-1 in that optimum.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1, std::vector<double>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(stages) + 1, std::vector<int>(static_cast<size_t>(layers) + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int l = s; l <= layers - (stages - s); ++l)
      for (int k = 1; k <= l - (s - 1); ++k) {
        const double prev = best[static_cast<size_t>(s - 1)][static_cast<size_t>(l - k)];
        if (prev == inf) continue;
        const double here = std::max(prev, m.stage_s(k, s == 1, s == stages));
        if (here < best[static_cast<size_t>(s)][static_cast<size_t>(l)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(l)] = here;
          cut[static_cast<size_t>(s)][static_cast<size_t>(l)] = k;
        }
      }
  std::vector<int> out(static_cast<size_t>(stages));
  for (int s = stages, l = layers; s >= 1; --s) {
    out[static_cast<size_t>(s - 1)] = cut[static_cast<size_t>(s)][static_cast<size_t>(l)];
    l -= out[static_cast<size_t>(s - 1)];
  }
  return out;
}

}  // namespace stagecraft::planner
