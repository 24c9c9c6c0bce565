// The zero-bubble family (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
// backward splits into I (input gradient, on the critical path) and W (weight gradient,
// deferred to fill bubbles).
//   zb-h1: the paper's handcrafted ZB-H1 (Sec. 2.1): 1F1B's order of F and I (p-1-r warm-up
//          forwards on rank r), each rank's W passes delayed by r microbatches, so that every
//          rank holds p microbatches at most (1F1B's first rank); with T_F = T_I = T_W and m >= p
//          one iteration takes 3m + p - 1, a bubble of (p-1)(T_F + T_I - T_W) per rank;
//   zb-h2: the handcrafted ZB-H2 (Sec. 2.2): 2p-1-2r warm-up forwards fill the wait for the
//          first I, W passes delayed by 2r, so that every rank holds 2p-1 microbatches; with
//          m >= 2p-1 each rank is busy for 3m without a gap (the parallelogram);
//   zb-h1-greedy, zb-h2-greedy: the same memory limits (p, 2p in flight) met by the greedy list
//          scheduler (greedy.h), which finds neither closed form (kept for comparison);
//   zb-v:  two stages per rank in V placement (stage r going down, 2p-1-r coming up), as the
//          authors build it by hand (their repository's handcrafted ZB-V; PyTorch's
//          ScheduleZBVZeroBubble is the same construction): 2p chunk activations, 1F1B's memory,
//          at most; with T_F = T_I = T_W per chunk and m >= 2p-1, rank r idles r steps before its
//          first forward and p-1-r after its last W: 6m + p - 1 chunk steps per iteration;
//   zb1p:  v stages per rank in loop placement, PyTorch's ScheduleInterleavedZeroBubble (the
//          paper's ZB-1P over interleaved chunks): interleaved 1F1B's chunk order in rounds of
//          m / max(1, m/p) microbatches, (v-1) rounds + p-1-r warm-up forwards, each I followed
//          by the oldest W once r I passes have gone by.
#include <algorithm>
#include <vector>

#include "schedules/greedy.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

// The greedy list schedule with the I/W split, one stage per rank, `in_flight` microbatches at most.
Schedule greedy_zb(const std::string& name, const GeneratorOptions& o, int in_flight) {
  GreedyOptions g;
  g.name = name;
  g.ranks = o.ranks;
  g.microbatches = o.microbatches;
  g.num_stages = o.ranks;
  g.placement = PlacementKind::Loop;
  g.stage_to_rank = loop_placement(g.num_stages, o.ranks);
  g.split_backward = true;
  g.f_s = g.i_s = g.w_s = 1;
  g.max_in_flight.assign(static_cast<size_t>(o.ranks), in_flight);
  Schedule s = greedy_schedule(g);
  s.params["in_flight_limit"] = in_flight;
  return s;
}

GeneratorInfo base(const char* name, const char* summary) {
  GeneratorInfo g;
  g.name = name;
  g.summary = summary;
  g.source = "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks >= 1, microbatches >= 1, no chunks";
  g.check = [n = std::string(name)](const GeneratorOptions& o) {
    constraint::one_stage_per_rank(n, o);
  };
  return g;
}

// Rank r of a handcrafted H schedule: `warmup` forwards, then per microbatch k its I, the W of
// microbatch k - delay once there is one, and the next forward; the remaining W last.
void handcrafted_rank(std::vector<Action>& list, int r, int m, int warmup, int delay) {
  int f = 0, w = 0;
  while (f < std::min(warmup, m)) list.push_back(Action::make(r, Op::F, f++));
  for (int k = 0; k < m; ++k) {
    list.push_back(Action::make(r, Op::I, k));
    if (k - w >= delay) list.push_back(Action::make(r, Op::W, w++));
    if (f < m) list.push_back(Action::make(r, Op::F, f++));
  }
  while (w < m) list.push_back(Action::make(r, Op::W, w++));
}

// Warm-up and delay on rank r of ZB-H1 (h = 1) and ZB-H2 (h = 2): h (p - r) - (h - 1) forwards
// (H1: 1F1B's p-1-r and the forward its first I follows; H2: 2p-1-2r, every slot before the
// first I can reach rank r) and W delayed h r microbatches, so that every rank holds
// h p - (h - 1) microbatches: p, 2p - 1.
Schedule handcrafted(const std::string& name, const GeneratorOptions& o, int h) {
  const int p = o.ranks, m = o.microbatches;
  Schedule s = make_schedule(name, p, p, m, PlacementKind::Loop);
  for (int r = 0; r < p; ++r) handcrafted_rank(s.actions[static_cast<size_t>(r)], r, m, h * (p - r) - (h - 1), h * r);
  s.params["in_flight_limit"] = h * p - (h - 1);
  return s;
}

// Rank r of ZB-V over p ranks and m microbatches. The construction needs 2p-1 microbatches to
// fill the V; with fewer, it is built for 2p-1 and the passes of the missing ones are dropped
// (as the authors and PyTorch do), which leaves a valid, slower order.
void zbv_rank(std::vector<Action>& list, int r, int p, int m) {
  const int n = std::max(m, 2 * p - 1);
  const int down = r, up = 2 * p - 1 - r;  // rank r's stage on the way down and on the way up
  int f0 = 0, f1 = 0, i0 = 0, i1 = 0;      // next microbatch of F and I on each of the two stages
  auto put = [&](int stage, Op op, int mb) {
    if (mb < m) list.push_back(Action::make(stage, op, mb));
  };
  auto f_i_w = [&](int stage, int& f, int& i) {  // one forward, then one input and weight backward
    put(stage, Op::F, f++);
    put(stage, Op::I, i);
    put(stage, Op::W, i++);
  };
  // Warm-up: 2(p-r)-1 forwards down, r pairs (up, down), then p-r rounds of F, I, W on the way up.
  for (int k = 0; k < 2 * (p - r) - 1; ++k) put(down, Op::F, f0++);
  for (int k = 0; k < r; ++k) {
    put(up, Op::F, f1++);
    put(down, Op::F, f0++);
  }
  for (int k = 0; k < p - r; ++k) f_i_w(up, f1, i1);
  // Steady: a forward down while there is one, the I and W down, then F, I, W up.
  while (f1 < f0 || f0 < n) {
    if (f0 < n) put(down, Op::F, f0++);
    put(down, Op::I, i0);
    put(down, Op::W, i0++);
    f_i_w(up, f1, i1);
  }
  // Cool-down: r pairs of I (down, up), p-r of I down with the oldest W down, the rest of the Ws.
  int w0 = i0, w1 = i1;
  for (int k = 0; k < r; ++k) {
    put(down, Op::I, i0++);
    put(up, Op::I, i1++);
  }
  for (int k = 0; k < p - r; ++k) {
    put(down, Op::I, i0++);
    put(down, Op::W, w0++);
  }
  while (w1 < i1) put(up, Op::W, w1++);
  while (w0 < i0) put(down, Op::W, w0++);
}

// Rank r of ZB1P over p ranks, v chunks and m microbatches (stage c p + r is rank r's chunk c).
// Microbatches go in rounds of m / max(1, m/p); forward k runs chunk (k / round) mod v, backward
// k the same count from the last chunk down. After (v-1) rounds + p-1-r warm-up forwards each
// step is F then I, and once r I passes have gone by, each I is followed by the W of the oldest I.
void zb1p_rank(std::vector<Action>& list, int r, int p, int v, int m) {
  const int per_round = m / std::max(1, m / p), total = m * v;
  const int warmup = std::min((v - 1) * per_round + (p - 1 - r), total);
  std::vector<int> next_f(static_cast<size_t>(p * v)), next_i(next_f), next_w(next_f);  // (p v) per stage
  std::vector<int> i_stages;  // stage of each I pass so far, in order: the Ws follow it
  size_t w_done = 0;
  auto put = [&](int stage, Op op, std::vector<int>& next) {
    list.push_back(Action::make(stage, op, next[static_cast<size_t>(stage)]++));
  };
  auto put_w = [&] { put(i_stages[w_done++], Op::W, next_w); };
  for (int k = 0; k < total + warmup; ++k) {
    if (k < total) put(((k / per_round) % v) * p + r, Op::F, next_f);
    if (k < warmup) continue;
    const int stage = (v - 1 - ((k - warmup) / per_round) % v) * p + r;
    put(stage, Op::I, next_i);
    i_stages.push_back(stage);
    if (k - warmup >= r) put_w();
  }
  while (w_done < i_stages.size()) put_w();
}

}  // namespace

GeneratorInfo zb_h1_generator() {
  GeneratorInfo g = base("zb-h1", "zero bubble H1 as handcrafted (Qi et al. Sec. 2.1): 1F1B with W delayed r on rank r, p in flight");
  g.aliases = {"zbh1", "zero-bubble-h1"};
  g.build = [](const GeneratorOptions& o) { return handcrafted("zb-h1", o, 1); };
  return g;
}

GeneratorInfo zb_h2_generator() {
  GeneratorInfo g = base("zb-h2", "zero bubble H2 as handcrafted (Qi et al. Sec. 2.2): 2p-1-2r warm-up, W delayed 2r, 2p-1 in flight");
  g.aliases = {"zbh2", "zero-bubble-h2"};
  g.build = [](const GeneratorOptions& o) { return handcrafted("zb-h2", o, 2); };
  return g;
}

GeneratorInfo zb_h1_greedy_generator() {
  GeneratorInfo g = base("zb-h1-greedy", "greedy list schedule with I/W split and p in flight (ZB-H1's memory)");
  g.build = [](const GeneratorOptions& o) { return greedy_zb("zb-h1-greedy", o, o.ranks); };
  return g;
}

GeneratorInfo zb_h2_greedy_generator() {
  GeneratorInfo g = base("zb-h2-greedy", "greedy list schedule with I/W split and 2p in flight");
  g.build = [](const GeneratorOptions& o) { return greedy_zb("zb-h2-greedy", o, 2 * o.ranks); };
  return g;
}

GeneratorInfo zb_v_generator() {
  GeneratorInfo g = base("zb-v", "zero bubble V as its authors build it: two stages per rank in V placement, 1F1B's activation memory");
  g.aliases = {"zbv", "zero-bubble-v", "schedulezbvzerobubble"};
  g.source = "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024 (ZB-V; handcrafted as in the authors' repository and PyTorch's ScheduleZBVZeroBubble)";
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    Schedule s = make_schedule("zb-v", p, 2 * p, m, PlacementKind::V);
    for (int r = 0; r < p; ++r) zbv_rank(s.actions[static_cast<size_t>(r)], r, p, m);
    s.params["in_flight_limit"] = p;
    return s;
  };
  return g;
}

GeneratorInfo zb1p_generator() {
  GeneratorInfo g = base("zb1p", "interleaved zero bubble (ZB1P): v stages per rank in loop placement, I/W split, as PyTorch builds it");
  g.aliases = {"interleaved-zero-bubble", "scheduleinterleavedzerobubble"};
  g.source = "Qi et al., ICLR 2024 (ZB-1P); PyTorch ScheduleInterleavedZeroBubble";
  g.params = {"ranks", "microbatches", "chunks"};
  g.constraints = "chunks >= 1 (default 2), microbatches >= 1 and a multiple of max(1, microbatches / ranks) (rounds of equal size)";
  g.check = [](const GeneratorOptions& o) {
    constraint::looped_stages("zb1p", o);
    constraint::multiple_of("zb1p", "microbatches", o.microbatches, std::max(1, o.microbatches / o.ranks),
                            "microbatches go in max(1, microbatches / ranks) rounds of equal size");
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, v = o.chunks == 0 ? 2 : o.chunks;
    Schedule s = make_schedule("zb1p", p, p * v, m, PlacementKind::Loop);
    s.params["chunks"] = v;
    for (int r = 0; r < p; ++r) zb1p_rank(s.actions[static_cast<size_t>(r)], r, p, v, m);
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
