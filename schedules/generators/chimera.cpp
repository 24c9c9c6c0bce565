// Chimera (Li and Hoefler, SC 2021): two pipelines in opposite directions over D devices. The
// "down" pipeline places its stage k on device k, the "up" pipeline its stage k on device
// D-1-k, so every device holds one stage of each: two copies of the weights, whose gradients
// are reduced together at the end (one REDUCE_GRAD per stage after the device's last
// backward; the evaluator and simulator synchronise the two copies' reductions).
//
// Construction, as the paper builds it (Sec. 3.2): microbatches come in units of D, the first
// D/2 of a unit going down, the rest up. Each direction alone is a 1F1B pipeline of D stages
// with D/2 microbatches; the up pipeline is the mirror image of the down one. On each device
// the two directions' actions are merged by their start times in those pipelines (T_B = 2
// T_F), the down direction first on ties in the upper half of the devices and the up
// direction first in the lower half, so that each fills the other's bubbles. Units follow
// one another (the paper's direct concatenation).
#include <algorithm>
#include <tuple>

#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

struct Timed {
  double start;
  int tie;     // tie-break order on equal start
  Action action;
};

// 1F1B over D stages with n microbatches: each rank's actions with their start times for
// F = 1, B = 2 and no communication.
std::vector<std::vector<std::pair<double, Action>>> one_f_one_b_timeline(int D, int n) {
  std::vector<std::vector<Action>> lists(static_cast<size_t>(D));
  for (int r = 0; r < D; ++r) {
    int warm = std::min(D - 1 - r, n), f = 0, b = 0;
    while (f < warm) lists[static_cast<size_t>(r)].push_back(Action::make(r, Op::F, f++));
    while (f < n) {
      lists[static_cast<size_t>(r)].push_back(Action::make(r, Op::F, f++));
      lists[static_cast<size_t>(r)].push_back(Action::make(r, Op::B, b++));
    }
    while (b < n) lists[static_cast<size_t>(r)].push_back(Action::make(r, Op::B, b++));
  }
  const double kUnset = -1;
  std::vector<double> f_end(static_cast<size_t>(D * n), kUnset), b_end(static_cast<size_t>(D * n), kUnset);
  std::vector<size_t> next(static_cast<size_t>(D), 0);
  std::vector<double> free_at(static_cast<size_t>(D), 0);
  std::vector<std::vector<std::pair<double, Action>>> out(static_cast<size_t>(D));
  size_t left = static_cast<size_t>(2 * D * n);
  while (left > 0) {
    for (int r = 0; r < D; ++r) {
      size_t& i = next[static_cast<size_t>(r)];
      if (i >= lists[static_cast<size_t>(r)].size()) continue;
      const Action& a = lists[static_cast<size_t>(r)][i];
      double ready;
      size_t k = static_cast<size_t>(r * n + a.microbatch);
      if (a.op == Op::F) {
        ready = r == 0 ? 0 : f_end[static_cast<size_t>((r - 1) * n + a.microbatch)];
      } else {
        ready = r == D - 1 ? f_end[k] : b_end[static_cast<size_t>((r + 1) * n + a.microbatch)];
      }
      if (ready < 0) continue;
      double start = std::max(ready, free_at[static_cast<size_t>(r)]);
      double end = start + (a.op == Op::F ? 1.0 : 2.0);
      (a.op == Op::F ? f_end : b_end)[k] = end;
      free_at[static_cast<size_t>(r)] = end;
      out[static_cast<size_t>(r)].emplace_back(start, a);
      ++i;
      --left;
    }
  }
  return out;
}

}  // namespace

GeneratorInfo chimera_generator() {
  GeneratorInfo g;
  g.name = "chimera";
  g.aliases = {"chimera-bidirectional"};
  g.summary = "two pipelines in opposite directions, a weight copy per direction";
  g.source = "Li and Hoefler, Chimera, SC 2021, Sec. 3";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks even, at least 2; microbatches a multiple of ranks (units of D, half in each direction); no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::at_least("chimera", "ranks", o.ranks, 2, "two directions need two devices");
    constraint::multiple_of("chimera", "ranks", o.ranks, 2, "each direction takes half of every unit of D microbatches");
    constraint::positive("chimera", "microbatches", o.microbatches);
    constraint::multiple_of("chimera", "microbatches", o.microbatches, o.ranks,
                            "Chimera schedules units of D microbatches, half in each direction");
    constraint::no_chunks("chimera", o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int D = o.ranks, half = D / 2;
    std::vector<int> map(static_cast<size_t>(2 * D));
    for (int k = 0; k < D; ++k) {
      map[static_cast<size_t>(k)] = k;              // down pipeline
      map[static_cast<size_t>(D + k)] = D - 1 - k;  // up pipeline
    }
    Schedule s = make_schedule("chimera", D, 2 * D, o.microbatches, PlacementKind::Explicit, map, 2);
    auto pipe = one_f_one_b_timeline(D, half);
    for (int unit = 0; unit * D < o.microbatches; ++unit) {
      for (int d = 0; d < D; ++d) {
        std::vector<Timed> merged;
        bool down_first = d < half;
        for (const auto& [t, a] : pipe[static_cast<size_t>(d)]) {  // down: stage d, microbatch unit*D + j
          Action x = a;
          x.stage = d;
          x.microbatch = unit * D + a.microbatch;
          merged.push_back({t, down_first ? 0 : 1, x});
        }
        for (const auto& [t, a] : pipe[static_cast<size_t>(D - 1 - d)]) {  // up: stage D + (D-1-d)
          Action x = a;
          x.stage = D + (D - 1 - d);
          x.microbatch = unit * D + half + a.microbatch;
          merged.push_back({t, down_first ? 1 : 0, x});
        }
        std::stable_sort(merged.begin(), merged.end(),
                         [](const Timed& a, const Timed& b) { return std::tie(a.start, a.tie) < std::tie(b.start, b.tie); });
        for (const Timed& t : merged) s.actions[static_cast<size_t>(d)].push_back(t.action);
      }
    }
    s.params["eager_grad_reduce"] = true;  // each stage's allreduce as soon as its gradients are ready
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
