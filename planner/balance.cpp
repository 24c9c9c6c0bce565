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

namespace {

// Layers per stage minimising `cost` summed over stages, each stage's time at most `cap`
// (infinite: no cap), or the largest stage time when `bottleneck`: dynamic programming over
// (stages used, layers used), O(stages * layers^2).
std::vector<int> solve(int layers, int stages, const StageTimeModel& m, double cap, bool bottleneck) {
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][l]: the optimum over the first s stages holding the first l layers; cut[s][l]: the
  // layers of stage s-1 in it.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1, std::vector<double>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(stages) + 1, std::vector<int>(static_cast<size_t>(layers) + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int l = s; l <= layers - (stages - s); ++l)
      for (int k = 1; k <= l - (s - 1); ++k) {
        const double prev = best[static_cast<size_t>(s - 1)][static_cast<size_t>(l - k)];
        const double t = m.stage_s(k, s == 1, s == stages);
        if (prev == inf || t > cap) continue;
        const double here = bottleneck ? std::max(prev, t) : prev + t * t;
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

double bottleneck_of(const std::vector<int>& part, const StageTimeModel& m) {
  double worst = 0;
  for (size_t i = 0; i < part.size(); ++i) worst = std::max(worst, m.stage_s(part[i], i == 0, i + 1 == part.size()));
  return worst;
}

}  // namespace

std::vector<int> balance_stages(int layers, int stages, const StageTimeModel& m) {
  if (stages < 1 || layers < stages)
    throw InputError("stage balancing: " + std::to_string(layers) + " layers over " + std::to_string(stages) +
                     " stages is invalid (each stage needs at least one layer)");
  // First the smallest bottleneck; then, among the partitions that reach it, the most even
  // (least sum of squared stage times): the fill and drain of a pipeline add every stage.
  const double cap = bottleneck_of(solve(layers, stages, m, std::numeric_limits<double>::infinity(), true), m);
  return solve(layers, stages, m, cap * (1 + 1e-12), false);
}

}  // namespace stagecraft::planner
