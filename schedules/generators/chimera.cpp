// Chimera (Li and Hoefler, SC 2021): two pipelines in opposite directions over D devices. The
// "down" pipeline places its stage k on device k, the "up" pipeline its stage k on device
// D-1-k, so every device holds one stage of each: two copies of the weights, whose gradients
// are reduced together at the end (one REDUCE_GRAD per stage after the device's last
// backward; the evaluator and simulator synchronise the two copies' reductions).
//
// Construction, as the paper builds it (Sec. 3.2): microbatches come in units of D, the first
// D/2 of a unit going down, the rest up. Each direction alone is a 1F1B pipeline of D stages
// with D/2 microbatches; the up pipeline is the mirror image of the down one. On each device
// the two directions' actions are merged by their start times in those pipelines, timed in the
// paper's slots (a forward and a backward one slot each). On a tie the direction at the later
// stage of its pipeline goes first (on device d < D/2 the up pipeline's stage D-1-d, on the
// others the down pipeline's stage d): the one more work waits on. That fills each direction's
// bubbles with the other's work and takes the paper's 2N + D - 2 slots at N = D (its D - 2
// bubbles, Sec. 3.2 and Table 2: 10 slots for D = N = 4). Units follow one another as the
// paper's direct concatenation (Sec. 3.5): unit u's timeline starts u * 2D slots later (2D:
// one unit's work on a device), so the next unit's first forwards fill the bubbles at the end
// of the one before.
#include <algorithm>
#include <tuple>

#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

struct Timed {
  double start;  // slot in the merged timeline
  int unit;      // earlier units first on equal start
  int tie;       // then this direction order
  Action action;
};

// 1F1B over D stages with n microbatches: each rank's actions with their start times in slots
// (F = B = 1) and no communication.
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
      double end = start + 1.0;
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
    const int units = o.microbatches / D;
    const double unit_slots = 2.0 * D;  // one unit's work on a device: D/2 microbatches x 2 directions x (F + B)
    for (int d = 0; d < D; ++d) {
      const bool up_first = d < half;  // the up pipeline's stage on device d is D-1-d, later than d
      std::vector<Timed> merged;
      for (int unit = 0; unit < units; ++unit) {
        const double offset = unit * unit_slots;
        for (const auto& [t, a] : pipe[static_cast<size_t>(d)]) {  // down: stage d, microbatch unit*D + j
          Action x = a;
          x.stage = d;
          x.microbatch = unit * D + a.microbatch;
          merged.push_back({t + offset, unit, up_first ? 1 : 0, x});
        }
        for (const auto& [t, a] : pipe[static_cast<size_t>(D - 1 - d)]) {  // up: stage D + (D-1-d)
          Action x = a;
          x.stage = D + (D - 1 - d);
          x.microbatch = unit * D + half + a.microbatch;
          merged.push_back({t + offset, unit, up_first ? 0 : 1, x});
        }
      }
      std::stable_sort(merged.begin(), merged.end(), [](const Timed& a, const Timed& b) {
        return std::tie(a.start, a.unit, a.tie) < std::tie(b.start, b.unit, b.tie);
      });
      for (const Timed& t : merged) s.actions[static_cast<size_t>(d)].push_back(t.action);
    }
    s.params["eager_grad_reduce"] = true;  // each stage's allreduce as soon as its gradients are ready
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
