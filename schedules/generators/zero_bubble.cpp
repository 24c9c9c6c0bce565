// The zero-bubble family (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
// backward splits into I (input gradient, on the critical path) and W (weight gradient,
// deferred to fill bubbles). Each schedule is built by the greedy scheduler (greedy.h) with
// T_F = T_I = T_W, as the paper's handcrafted and automatic schedules assume:
//   zb-h1: one stage per rank, at most p microbatches in flight per rank (1F1B's memory);
//   zb-h2: one stage per rank, at most 2p in flight (zero bubble for enough microbatches);
//   zb-v:  two stages per rank in V placement, at most p microbatches (2p stage activations of
//          half size) in flight: 1F1B's memory with a smaller bubble (ZB-V, Qi et al. 2024);
//   zb1p:  v stages per rank in loop placement: PyTorch's ScheduleInterleavedZeroBubble.
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

}  // namespace

GeneratorInfo zb_h1_generator() {
  GeneratorInfo g = base("zb-h1", "zero bubble H1: I/W split, W fills bubbles, at most p microbatches in flight");
  g.aliases = {"zbh1", "zero-bubble-h1"};
  g.build = [](const GeneratorOptions& o) { return zb("zb-h1", o, 1, PlacementKind::Loop, o.ranks); };
  return g;
}

GeneratorInfo zb_h2_generator() {
  GeneratorInfo g = base("zb-h2", "zero bubble H2: I/W split, at most 2p microbatches in flight");
  g.aliases = {"zbh2", "zero-bubble-h2"};
  g.build = [](const GeneratorOptions& o) { return zb("zb-h2", o, 1, PlacementKind::Loop, 2 * o.ranks); };
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
