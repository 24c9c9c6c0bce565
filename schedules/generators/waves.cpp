// Hanayo's wave-like pipelines (Zhou et al., SC 2023, Sec. 3.2-3.3): the model in 2*W*P stages
// zig-zagging over P devices (V placement: down the devices, back up, W times), one copy of
// the weights. Receives are posted one compute ahead (Hanayo Sec. 4.2, prefetching): the
// schedule asks lowering for it. Chimera-wave (Hanayo Sec. 3.2, Fig. 5) is the one-wave case:
// Chimera's two directions folded onto one zig-zag pipeline without the weight copy.
//
// `hanayo` builds the schedule the way the paper draws it, for any number of microbatches m:
//  1. The unit: P microbatches (the paper's B = P, eq. (1)) in the wave, each device running
//     the earliest work it can, backward first, T_B = 2 T_F (greedy.h). This is the pattern
//     of Hanayo Fig. 6-7: forwards packed behind each other (zone A), the switch to backward
//     (zone B), the drain (zone C).
//  2. Units follow each other, unit u's actions ordered as unit 0's plus u * delta: the next
//     unit's forwards fill the drain of the one before, the way Chimera concatenates its
//     basic units (Chimera, SC 2021, Sec. 3.5), which Hanayo inherits. A device never holds
//     more stage activations than P microbatches' worth (in_flight * 2W stages): the
//     activation memory of 1F1B's first stage, which Hanayo keeps (Sec. 3.4, "our M_w and
//     M_a remain consistent"). delta is the one that gives the shortest pipeline with unit
//     costs, from a quarter of a unit's work up to the unit's length; a last unit of fewer
//     than P microbatches gets its own spacing from the unit before it.
// `hanayo-greedy` is the earlier construction: the greedy list scheduler over all m at once,
// a whole microbatch counted as present on a device from its first forward there to its last
// backward. It equals `hanayo` for m <= P and is worse above (docs/schedules.md).
#include <algorithm>
#include <cmath>
#include <optional>

#include "schedules/greedy.h"
#include "schedules/error.h"
#include "schedules/json_read.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

constexpr double kF = 1, kB = 2;  // unit costs that order the work: T_B = 2 T_F (Hanayo Sec. 3.4)

int waves_of(const GeneratorOptions& o, const char* name) {
  if (!o.extra.contains("waves")) return 2;
  return json_int(o.extra["waves"], std::string("schedule ") + name + ": waves");
}

int in_flight_of(const GeneratorOptions& o) { return o.extra.value("in_flight", o.ranks); }

GreedyOptions wave_options(const std::string& name, int ranks, int microbatches, int waves) {
  GreedyOptions g;
  g.name = name;
  g.ranks = ranks;
  g.microbatches = microbatches;
  g.num_stages = 2 * waves * ranks;
  g.placement = PlacementKind::V;
  g.stage_to_rank = v_placement(g.num_stages, ranks);
  g.f_s = kF;
  g.b_s = kB;
  return g;
}

Schedule finish(Schedule s, int waves) {
  s.params["waves"] = waves;
  s.params["recv_lookahead"] = 1;
  s.params["eager_grad_reduce"] = true;  // Chimera's runtime, which Hanayo's compares with
  return s;
}

// The earlier construction: the greedy scheduler over all microbatches, at most `in_flight`
// microbatches present per device.
Schedule greedy_waves(const std::string& name, const GeneratorOptions& o, int waves) {
  GreedyOptions g = wave_options(name, o.ranks, o.microbatches, waves);
  g.max_in_flight.assign(static_cast<size_t>(o.ranks), in_flight_of(o));
  return greedy_schedule(g);
}

// Units of P microbatches after each other, each ordered like the first, `delta` apart.
// A last unit of fewer than P microbatches starts `last_delta` after the unit before it.
std::optional<std::pair<Schedule, double>> units(const std::string& name, const GeneratorOptions& o, int waves,
                                                 const GreedyTimes& unit, double delta, double last_delta) {
  const int P = o.ranks, m = o.microbatches;
  GreedyOptions g = wave_options(name, P, m, waves);
  g.max_live_stages.assign(static_cast<size_t>(P), in_flight_of(o) * 2 * waves);
  const int last = m % P ? m / P : -1;  // index of a partial last unit
  g.priority = [&unit, delta, last_delta, last, P](Op op, int stage, int mb) {
    int u = mb / P;
    return unit.at(op, stage, mb % P, P) + (u == last ? (u - 1) * delta + last_delta : u * delta);
  };
  GreedyTimes t;
  try {
    Schedule s = greedy_schedule(g, &t);
    return std::make_pair(std::move(s), t.makespan);
  } catch (const Error&) {
    return std::nullopt;  // this delta fills the memory with work that cannot drain: try the next
  }
}

Schedule constructed_waves(const std::string& name, const GeneratorOptions& o, int waves) {
  const int P = o.ranks, m = o.microbatches;
  GeneratorOptions first = o;
  first.microbatches = std::min(m, P);
  GreedyTimes unit;
  GreedyOptions g = wave_options(name, P, first.microbatches, waves);
  g.max_in_flight.assign(static_cast<size_t>(P), in_flight_of(o));
  Schedule one = greedy_schedule(g, &unit);
  if (m <= P) return one;
  const double work = 2.0 * waves * P * (kF + kB);  // one unit's compute on a device
  const double step = std::max(1.0, std::floor(work / 24));
  std::optional<std::pair<Schedule, double>> best;
  double best_delta = 0;
  auto consider = [&](double delta, double last_delta) {
    auto c = units(name, o, waves, unit, delta, last_delta);
    if (c && (!best || c->second < best->second)) best = std::move(c), best_delta = delta;
  };
  for (double delta = std::floor(work / 4); delta <= unit.makespan; delta += step) consider(delta, delta);
  if (best && step > 1)  // then every delta between the coarse neighbours of the best
    for (double delta = best_delta - step + 1; delta < best_delta + step; ++delta)
      if (delta != best_delta && delta > 0) consider(delta, delta);
  if (best && m % P)  // a partial last unit drains sooner: its own spacing from the unit before
    for (double last = 0; last <= unit.makespan; last += step) consider(best_delta, last);
  if (!best)
    throw Error("schedule " + name + ": no spacing of its units of " + std::to_string(P) + " microbatches runs within " +
                std::to_string(in_flight_of(o)) + " microbatches in flight (raise in_flight)");
  return std::move(best->first);
}

GeneratorInfo wave_info(const char* name, bool greedy) {
  GeneratorInfo g;
  g.name = name;
  g.params = {"ranks", "microbatches", "waves", "in_flight"};
  g.constraints = "waves >= 1 (default 2), in_flight >= 1 (default ranks), microbatches >= 1, no chunks; the model needs 2*W*P layers or more";
  g.check = [name](const GeneratorOptions& o) {
    constraint::one_stage_per_rank(name, o);
    constraint::at_least(name, "waves", waves_of(o, name), 1);
    constraint::at_least(name, "in_flight", in_flight_of(o), 1);
  };
  g.build = [name, greedy](const GeneratorOptions& o) {
    int w = waves_of(o, name);
    return finish(greedy ? greedy_waves(name, o, w) : constructed_waves(name, o, w), w);
  };
  return g;
}

}  // namespace

GeneratorInfo hanayo_generator() {
  GeneratorInfo g = wave_info("hanayo", false);
  g.aliases = {"waves", "wave"};
  g.summary = "wave-like pipeline: 2*W*P stages zig-zagging over P ranks, units of P microbatches";
  g.source = "Zhou et al., Hanayo, SC 2023, Sec. 3.2-3.4 and 4.2";
  return g;
}

GeneratorInfo hanayo_greedy_generator() {
  GeneratorInfo g = wave_info("hanayo-greedy", true);
  g.summary = "Hanayo's waves from the greedy list scheduler over all microbatches (equal to hanayo for m <= P)";
  g.source = "Zhou et al., Hanayo, SC 2023, Sec. 3.2-3.3; stagecraft's greedy scheduler";
  return g;
}

GeneratorInfo chimera_wave_generator() {
  GeneratorInfo g = wave_info("chimera-wave", false);
  g.aliases = {"chimerawave"};
  g.params = {"ranks", "microbatches", "in_flight"};
  g.constraints = "microbatches >= 1, no chunks";
  g.summary = "Chimera folded onto one zig-zag pipeline of 2P stages, no weight copy (Hanayo with one wave)";
  g.source = "Zhou et al., Hanayo, SC 2023, Sec. 3.2 and Fig. 5";
  g.build = [](const GeneratorOptions& o) { return finish(constructed_waves("chimera-wave", o, 1), 1); };
  return g;
}

}  // namespace stagecraft::schedules
