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
//   zb-v:  two stages per rank in V placement, at most p microbatches (2p stage activations of
//          half size) in flight: 1F1B's memory with a smaller bubble (ZB-V, Qi et al. 2024),
//          by the greedy scheduler with T_F = T_I = T_W;
//   zb1p:  v stages per rank in loop placement: PyTorch's ScheduleInterleavedZeroBubble.
#include <algorithm>
#include <vector>

#include "schedules/greedy.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

Schedule zb(const std::string& name, const GeneratorOptions& o, int stages_per_rank, PlacementKind placement,
            int in_flight) {
  GreedyOptions g;
  g.name = name;
  g.ranks = o.ranks;
  g.microbatches = o.microbatches;
  g.num_stages = o.ranks * stages_per_rank;
  g.placement = placement;
  g.stage_to_rank = placement == PlacementKind::V ? v_placement(g.num_stages, o.ranks) : loop_placement(g.num_stages, o.ranks);
  g.split_backward = true;
  g.f_s = g.i_s = g.w_s = 1;
  g.max_in_flight.assign(static_cast<size_t>(o.ranks), in_flight);
  Schedule s = greedy_schedule(g);
  s.params["in_flight_limit"] = in_flight;
  if (stages_per_rank > 1 && placement == PlacementKind::Loop) s.params["chunks"] = stages_per_rank;
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
    constraint::positive(n, "ranks", o.ranks);
    constraint::positive(n, "microbatches", o.microbatches);
    constraint::no_chunks(n, o);
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
  g.build = [](const GeneratorOptions& o) { return zb("zb-h1-greedy", o, 1, PlacementKind::Loop, o.ranks); };
  return g;
}

GeneratorInfo zb_h2_greedy_generator() {
  GeneratorInfo g = base("zb-h2-greedy", "greedy list schedule with I/W split and 2p in flight");
  g.build = [](const GeneratorOptions& o) { return zb("zb-h2-greedy", o, 1, PlacementKind::Loop, 2 * o.ranks); };
  return g;
}

GeneratorInfo zb_v_generator() {
  GeneratorInfo g = base("zb-v", "zero bubble V: two stages per rank in V placement, 1F1B's activation memory");
  g.aliases = {"zbv", "zero-bubble-v"};
  g.build = [](const GeneratorOptions& o) { return zb("zb-v", o, 2, PlacementKind::V, o.ranks); };
  return g;
}

GeneratorInfo zb1p_generator() {
  GeneratorInfo g = base("zb1p", "interleaved zero bubble: v stages per rank in loop placement, I/W split");
  g.aliases = {"interleaved-zero-bubble", "scheduleinterleavedzerobubble"};
  g.source = "Qi et al., ICLR 2024; PyTorch ScheduleInterleavedZeroBubble (ZB1P)";
  g.params = {"ranks", "microbatches", "chunks"};
  g.constraints = "chunks >= 1 (default 2), microbatches >= 1";
  g.check = [](const GeneratorOptions& o) {
    constraint::positive("zb1p", "ranks", o.ranks);
    constraint::positive("zb1p", "microbatches", o.microbatches);
    constraint::at_least("zb1p", "chunks", o.chunks == 0 ? 2 : o.chunks, 1);
  };
  g.build = [](const GeneratorOptions& o) {
    return zb("zb1p", o, o.chunks == 0 ? 2 : o.chunks, PlacementKind::Loop, o.ranks);
  };
  return g;
}

}  // namespace stagecraft::schedules
