// Hanayo's wave-like pipelines (Zhou et al., SC 2023, Sec. 3.2-3.3): the model in 2*W*P stages
// zig-zagging over P devices (V placement: down the devices, back up, W times), one copy of
// the weights. Each device runs the earliest work it can, backward first (greedy.h, T_B = 2
// T_F), with at most P microbatches in flight per device: the activation memory of 1F1B's
// first stage (Hanayo Sec. 3.4, "our M_w and M_a remain consistent"). Receives are posted one
// compute ahead (Hanayo Sec. 4.2, prefetching): the schedule asks lowering for it.
// Chimera-wave (Hanayo Sec. 3.2, Fig. 5) is the one-wave case: Chimera's two directions
// folded onto one zig-zag pipeline without the weight copy.
#include "schedules/greedy.h"
#include "schedules/error.h"
#include "schedules/json_read.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

int waves_of(const GeneratorOptions& o) {
  if (!o.extra.contains("waves")) return 2;
  return json_int(o.extra["waves"], "schedule hanayo: waves");
}

Schedule wave_schedule(const std::string& name, const GeneratorOptions& o, int waves) {
  GreedyOptions g;
  g.name = name;
  g.ranks = o.ranks;
  g.microbatches = o.microbatches;
  g.num_stages = 2 * waves * o.ranks;
  g.placement = PlacementKind::V;
  g.stage_to_rank = v_placement(g.num_stages, o.ranks);
  g.f_s = 1;
  g.b_s = 2;
  int limit = o.extra.value("in_flight", o.ranks);
  g.max_in_flight.assign(static_cast<size_t>(o.ranks), limit);
  Schedule s = greedy_schedule(g);
  s.params["waves"] = waves;
  s.params["recv_lookahead"] = 1;
  s.params["eager_grad_reduce"] = true;  // Chimera's runtime, which Hanayo's compares with
  return s;
}

}  // namespace

GeneratorInfo hanayo_generator() {
  GeneratorInfo g;
  g.name = "hanayo";
  g.aliases = {"waves", "wave"};
  g.summary = "wave-like pipeline: 2*W*P stages zig-zagging over P ranks, prefetched receives";
  g.source = "Zhou et al., Hanayo, SC 2023, Sec. 3.2-3.4 and 4.2";
  g.params = {"ranks", "microbatches", "waves", "in_flight"};
  g.constraints = "waves >= 1 (default 2), microbatches >= 1, no chunks; the model needs 2*W*P layers or more";
  g.check = [](const GeneratorOptions& o) {
    constraint::positive("hanayo", "ranks", o.ranks);
    constraint::positive("hanayo", "microbatches", o.microbatches);
    constraint::no_chunks("hanayo", o);
    constraint::at_least("hanayo", "waves", waves_of(o), 1);
  };
  g.build = [](const GeneratorOptions& o) { return wave_schedule("hanayo", o, waves_of(o)); };
  return g;
}

GeneratorInfo chimera_wave_generator() {
  GeneratorInfo g;
  g.name = "chimera-wave";
  g.aliases = {"chimerawave"};
  g.summary = "Chimera folded onto one zig-zag pipeline of 2P stages, no weight copy (Hanayo with one wave)";
  g.source = "Zhou et al., Hanayo, SC 2023, Sec. 3.2 and Fig. 5";
  g.params = {"ranks", "microbatches"};
  g.constraints = "microbatches >= 1, no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::positive("chimera-wave", "ranks", o.ranks);
    constraint::positive("chimera-wave", "microbatches", o.microbatches);
    constraint::no_chunks("chimera-wave", o);
  };
  g.build = [](const GeneratorOptions& o) { return wave_schedule("chimera-wave", o, 1); };
  return g;
}

}  // namespace stagecraft::schedules
