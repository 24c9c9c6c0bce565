// DualPipe (DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1, Fig. 5 and
// Table 2) and its V-shaped half, DualPipeV (Sea AI Lab's "cut-in-half" of DualPipe; PyTorch's
// torch.distributed.pipelining ScheduleDualPipeV and dualpipe/dualpipev.py of the
// deepseek-ai/DualPipe repository). Written here from the step lists of dualpipe/dualpipe.py
// (deepseek-ai/DualPipe) and ScheduleDualPipeV._calculate_single_rank_operations (PyTorch).
//
// Both run, on every rank, two stages that take microbatches in opposite directions, and pair
// the forward of one with the backward of the other (an OVERLAP_F_B: in the authors' runtime
// one stage's all-to-all and pipeline transfers hide under the other's computation).
//
//   dualpipev: p ranks, 2p stages in V placement: rank r holds stage r (phase 0, on the way
//              down) and stage 2p-1-r (phase 1, on the way up); m microbatches through both.
//   dualpipe:  p ranks (even), two copies of a p-stage model as two chains (as chimera): the
//              forward direction places part k on rank k (stage k), the reverse direction part
//              k on rank p-1-k (stage p+k), so rank r holds stage r and stage 2p-1-r. Half of
//              the m microbatches enter at rank 0 (microbatches 0 .. m/2-1), half at rank p-1
//              (m/2 .. m-1). On the first half of the ranks phase 0 is the forward direction;
//              on the second half phase 0 is the reverse one (dualpipe.py's
//              `phase ^= is_in_second_half`).
//
// The step order is one function of (P, h, n): P ranks that a direction crosses before it
// turns (dualpipev: p; dualpipe: p/2, the ranks up to the middle), the rank's distance h from
// the start of its phase 0 (dualpipev: r; dualpipe: min(r, p-1-r)) and n microbatches per
// stage (dualpipev: m; dualpipe: m/2). dualpipe.py and PyTorch's ScheduleDualPipeV both go
// through the same eight steps with these three numbers:
//   1. 2(P-h-1) forwards of phase 0;
//   2. h+1 pairs: forward of phase 0, forward of phase 1;
//   3. P-h-1 rounds of I of phase 1, its W at once, forward of phase 1 (zero bubble);
//   4. n-2P+h+1 rounds of OVERLAP(F phase 0; B phase 1), OVERLAP(F phase 1; B phase 0): the
//      steady state. In the first round on the turning rank (h = P-1) the first pair runs as a
//      plain F then B, not overlapped ("to further reduce bubble size");
//   5. P-h-1 rounds: B of phase 1, OVERLAP(F phase 1; B phase 0);
//   6. h+1 pairs: backward of phase 1, backward of phase 0, full B for the first half of the
//      pairs and I (its W queued) for the second: from pair (h+1)/2 on (integer division) when
//      h is odd, from the phase-0 backward of that pair when h is even;
//   7. P-h-1 rounds: the oldest queued W, then I of phase 0;
//   8. h+1 of the queued Ws, oldest first.
// The Ws go first in first out over both stages (WeightGradStore's queue in dualpipe.py, the
// weight_queue of PyTorch). The microbatch floors below (n >= 2P) keep every step count
// >= 0 and step 4 at one round at least on every rank.
#include <algorithm>
#include <deque>
#include <utility>

#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

// One of a rank's two stages and the index of the first microbatch that goes through it.
struct Phase {
  int stage;
  int first_mb;
};

// Rank list of the eight steps above for (P, h, n); phase[0] and phase[1] as the header says.
void dualpipe_steps(std::vector<Action>& list, int P, int h, int n, const Phase (&phase)[2]) {
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};  // next microbatch (within the phase) to go forward, backward
  std::deque<std::pair<int, int>> weights;    // (stage, microbatch) of each I whose W is pending, oldest first
  auto mb = [&](int ph, int k) { return phase[ph].first_mb + k; };
  auto forward = [&](int ph) { list.push_back(Action::make(phase[ph].stage, Op::F, mb(ph, next_f[ph]++))); };
  auto backward = [&](int ph, bool split) {
    const int k = mb(ph, next_b[ph]++);
    list.push_back(Action::make(phase[ph].stage, split ? Op::I : Op::B, k));
    if (split) weights.emplace_back(phase[ph].stage, k);
  };
  auto weight = [&] {
    if (weights.empty()) return;  // never, by the counts of steps 6 to 8; kept as the sources keep it
    list.push_back(Action::make(weights.front().first, Op::W, weights.front().second));
    weights.pop_front();
  };
  auto overlap = [&](int f_ph, int b_ph) {  // forward of f_ph with the full backward of b_ph
    const int f = mb(f_ph, next_f[f_ph]++), b = mb(b_ph, next_b[b_ph]++);
    list.push_back(Action::overlap(phase[f_ph].stage, f, phase[b_ph].stage, b, Op::B));
  };

  for (int i = 0; i < 2 * (P - h - 1); ++i) forward(0);  // 1
  for (int i = 0; i < h + 1; ++i) {                      // 2
    forward(0);
    forward(1);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 3
    backward(1, true);
    weight();
    forward(1);
  }
  for (int i = 0; i < n - 2 * P + h + 1; ++i) {  // 4
    if (i == 0 && h == P - 1) {
      forward(0);
      backward(1, false);
    } else {
      overlap(0, 1);
    }
    overlap(1, 0);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 5
    backward(1, false);
    overlap(1, 0);
  }
  bool split = false;  // 6
  for (int i = 0; i < h + 1; ++i) {
    if (i == (h + 1) / 2 && h % 2 == 1) split = true;
    backward(1, split);
    if (i == (h + 1) / 2 && h % 2 == 0) split = true;
    backward(0, split);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 7
    weight();
    backward(0, true);
  }
  for (int i = 0; i < h + 1; ++i) weight();  // 8
}

}  // namespace

GeneratorInfo dualpipe_v_generator() {
  GeneratorInfo g;
  g.name = "dualpipev";
  g.aliases = {"dualpipe-v", "scheduledualpipev"};
  g.summary = "DualPipe cut in half: two stages per rank in V placement, overlapped F&B pairs, I/W split at the ends";
  g.source = "Sea AI Lab's cut-in-half of DualPipe (DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.1); as PyTorch's "
             "ScheduleDualPipeV and deepseek-ai/DualPipe's dualpipev.py build it";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks >= 1, microbatches >= 2 x ranks (one per stage, as PyTorch's ScheduleDualPipeV requires), no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::positive("dualpipev", "ranks", o.ranks);
    constraint::at_least("dualpipev", "microbatches", o.microbatches, 2 * o.ranks,
                         "one per stage, 2 x ranks, as PyTorch's ScheduleDualPipeV requires");
    constraint::no_chunks("dualpipev", o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    Schedule s = make_schedule("dualpipev", p, 2 * p, m, PlacementKind::V);
    for (int r = 0; r < p; ++r) {
      const Phase phase[2] = {{r, 0}, {2 * p - 1 - r, 0}};
      dualpipe_steps(s.actions[static_cast<size_t>(r)], p, r, m, phase);
    }
    return s;
  };
  return g;
}

GeneratorInfo dualpipe_generator() {
  GeneratorInfo g;
  g.name = "dualpipe";
  g.summary = "DeepSeek-V3's bidirectional pipeline: two weight copies fed from both ends, overlapped F&B pairs";
  g.source = "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1, Fig. 5, Table 2; "
             "deepseek-ai/DualPipe dualpipe.py";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks even, at least 2; microbatches even and >= 2 x ranks (half enter at each end), no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::at_least("dualpipe", "ranks", o.ranks, 2, "two directions need two ranks");
    constraint::multiple_of("dualpipe", "ranks", o.ranks, 2, "the two directions turn at the middle rank pair");
    constraint::at_least("dualpipe", "microbatches", o.microbatches, 2 * o.ranks,
                         "2 x ranks, as dualpipe.py asserts: half enter at each end, one per rank at least");
    constraint::multiple_of("dualpipe", "microbatches", o.microbatches, 2, "half of them enter at each end");
    constraint::no_chunks("dualpipe", o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, half = m / 2;
    std::vector<int> map(static_cast<size_t>(2 * p));
    for (int k = 0; k < p; ++k) {
      map[static_cast<size_t>(k)] = k;              // forward direction: part k on rank k
      map[static_cast<size_t>(p + k)] = p - 1 - k;  // reverse direction: part k on rank p-1-k
    }
    Schedule s = make_schedule("dualpipe", p, 2 * p, m, PlacementKind::Explicit, map, 2);
    for (int r = 0; r < p; ++r) {
      const Phase fwd{r, 0}, rev{2 * p - 1 - r, half};
      const bool second_half = r >= p / 2;
      const Phase phase[2] = {second_half ? rev : fwd, second_half ? fwd : rev};
      dualpipe_steps(s.actions[static_cast<size_t>(r)], p / 2, std::min(r, p - 1 - r), half, phase);
    }
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
