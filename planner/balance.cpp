#include "planner/balance.h"

#include <algorithm>
#include <functional>
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

// The time of stage `s` (1-based) holding `k` items from item `first` on.
using StageTime = std::function<double(int s, int first, int k)>;

// Items per stage minimising the squared stage times summed over stages, each stage's time at
// most `cap` (infinite: no cap), or the largest stage time when `bottleneck`: dynamic
// programming over (stages used, items used), O(stages * items^2).
std::vector<int> solve(int layers, int stages, const StageTime& stage_s, double cap, bool bottleneck) {
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
        const double t = stage_s(s, l - k, k);
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

double bottleneck_of(const std::vector<int>& part, const StageTime& stage_s) {
  double worst = 0;
  int first = 0;
  for (size_t i = 0; i < part.size(); ++i) worst = std::max(worst, stage_s(static_cast<int>(i) + 1, first, part[i])), first += part[i];
  return worst;
}

std::vector<int> min_bottleneck_then_even(int items, int stages, const StageTime& t) {
  // First the smallest bottleneck; then, among the partitions that reach it, the most even
  // (least sum of squared stage times): the fill and drain of a pipeline add every stage.
  const double cap = bottleneck_of(solve(items, stages, t, std::numeric_limits<double>::infinity(), true), t);
  return solve(items, stages, t, cap * (1 + 1e-12), false);
}

}  // namespace

std::vector<int> balance_stages(int layers, int stages, const StageTimeModel& m) {
  if (stages < 1 || layers < stages)
    throw InputError("stage balancing: " + std::to_string(layers) + " layers over " + std::to_string(stages) +
                     " stages is invalid (each stage needs at least one layer)");
  return min_bottleneck_then_even(layers, stages, [&m, stages](int s, int, int k) { return m.stage_s(k, s == 1, s == stages); });
}

std::vector<int> balance_sequence(const std::vector<double>& item_s, int stages) {
  const int n = static_cast<int>(item_s.size());
  if (stages < 1 || n < stages)
    throw InputError("stage balancing: " + std::to_string(n) + " items over " + std::to_string(stages) +
                     " stages is invalid (each stage needs at least one)");
  std::vector<double> prefix(item_s.size() + 1, 0.0);
  for (size_t i = 0; i < item_s.size(); ++i) prefix[i + 1] = prefix[i] + item_s[i];
  return min_bottleneck_then_even(n, stages, [&prefix](int, int first, int k) {
    return prefix[static_cast<size_t>(first + k)] - prefix[static_cast<size_t>(first)];
  });
}

}  // namespace stagecraft::planner
