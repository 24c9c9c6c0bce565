// FOLD3D's AIAO schedule (Li et al., TPDS 2023, Sec. III-B and IV): the model folded into ns
// segments of p stages (segment k, rank r holds stage k*p + r, loop placement). All forwards
// of segment 0 for every microbatch, then segment 1, ...; then the backwards in reverse
// segment order (Algorithm 1). Activation checkpointing is on (R before each B), and each
// checkpoint is offloaded to host memory after its forward and reloaded one backward before
// it is needed (Sec. IV, intra-segment offloading): every segment's, or the first
// offload_segments ones' (estimate's "auto": the fewest that make the plan fit, since moving a
// checkpoint over the host link pays only when its memory is needed).
//
// Each segment's data-parallel reduction is split (Algorithm 2): the share 1 - rho starts
// right after the segment's last backward and overlaps the remaining segments' backwards; the
// share rho is deferred to the next iteration and overlaps the earlier segments' forwards, with
// rho = r / (c*r + 1), r the forward/backward time ratio and c = 2 with checkpointing
// (FOLD3D's public prototype). In the list the deferred shares of every segment open
// the iteration, before any forward, so they reduce the previous iteration's gradients; each
// segment's first forward waits for its own (and its parameters' update), so segment k's
// share overlaps the forwards of segments 0..k-1, and segment 0's is exposed.
#include <algorithm>

#include "schedules/error.h"
#include "schedules/json_read.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

int int_param(const GeneratorOptions& o, const char* key, int def) {
  if (!o.extra.contains(key)) return def;
  const auto& v = o.extra[key];
  if (v.is_string() && v.get<std::string>() == "auto")
    throw InputError(std::string("schedule fold3d-aiao: ") + key +
                     " = \"auto\" needs a model and a cluster (use estimate or compare); give a number here");
  return json_int(v, std::string("schedule fold3d-aiao: ") + key);
}

bool bool_param(const GeneratorOptions& o, const char* key, bool def) {
  if (!o.extra.contains(key)) return def;
  const auto& v = o.extra[key];
  if (v.is_string() && v.get<std::string>() == "auto")
    throw InputError(std::string("schedule fold3d-aiao: ") + key +
                     " = \"auto\" needs a model and a cluster (use estimate or compare); give true or false here");
  if (!v.is_boolean()) throw InputError(std::string("schedule fold3d-aiao: ") + key + " = " + v.dump() + " is invalid (expected true or false)");
  return v.get<bool>();
}

// Segments whose checkpoints go to host memory, from the first (whose checkpoints live
// longest): offload_segments if given, else all with offload and none without.
int offloaded_segments(const GeneratorOptions& o, int ns) {
  const bool offload = bool_param(o, "offload", true);
  if (!o.extra.contains("offload_segments")) return offload ? ns : 0;
  const int k = int_param(o, "offload_segments", 0);
  if (k < 0 || k > ns)
    throw InputError("schedule fold3d-aiao: offload_segments = " + std::to_string(k) + " is invalid (allowed: 0 to segments = " +
                     std::to_string(ns) + ")");
  if (!offload && k > 0)
    throw InputError("schedule fold3d-aiao: offload_segments = " + std::to_string(k) + " contradicts offload = false");
  return k;
}

double ratio_param(const GeneratorOptions& o) {
  if (!o.extra.contains("fwd_bwd_ratio")) return 0.5;  // T_B = 2 T_F
  const auto& v = o.extra["fwd_bwd_ratio"];
  if (!v.is_number() || !(v.get<double>() > 0))
    throw InputError("schedule fold3d-aiao: fwd_bwd_ratio = " + v.dump() + " is invalid (expected a number > 0)");
  return v.get<double>();
}

Action with_segment(Action a, int seg) {
  a.segment = seg;
  return a;
}

Action reduce(int stage, int seg, double fraction) {
  Action a = Action::make(stage, Op::REDUCE_GRAD);
  a.segment = seg;
  a.fraction = fraction;
  return a;
}

}  // namespace

GeneratorInfo fold3d_generator() {
  GeneratorInfo g;
  g.name = "fold3d-aiao";
  g.aliases = {"fold3d", "aiao"};
  g.summary = "FOLD3D all-in-all-out: segment by segment, DP reduction split across iterations, offload";
  g.source = "Li et al., FOLD3D, TPDS 2023, Sec. III-B, IV (Algorithms 1 and 2)";
  g.params = {"ranks", "microbatches", "segments", "offload", "offload_segments", "recompute", "fwd_bwd_ratio"};
  g.owns_recompute = true;
  g.constraints = "segments >= 1 (default 2; \"auto\" in estimate/compare), microbatches >= 1, no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::one_stage_per_rank("fold3d-aiao", o);
    constraint::at_least("fold3d-aiao", "segments", int_param(o, "segments", 2), 1);
    offloaded_segments(o, int_param(o, "segments", 2));
    bool_param(o, "recompute", true);
    ratio_param(o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, ns = int_param(o, "segments", 2);
    const int offload_k = offloaded_segments(o, ns);
    const bool recompute = bool_param(o, "recompute", true);
    const double r = ratio_param(o), c = recompute ? 2.0 : 1.0;
    const double rho = r / (c * r + 1);  // deferred share of each segment's reduction
    Schedule s = make_schedule("fold3d-aiao", p, p * ns, m, PlacementKind::Loop);
    for (int rank = 0; rank < p; ++rank) {
      auto& list = s.actions[static_cast<size_t>(rank)];
      // Backward order, to know which action precedes each backward (reload prefetch).
      std::vector<std::pair<int, int>> bwd;  // (stage, mb)
      for (int k = ns - 1; k >= 0; --k)
        for (int mb = 0; mb < m; ++mb) bwd.emplace_back(k * p + rank, mb);
      auto offloaded = [&](int st, int mb) { return st / p < offload_k && !(st / p == ns - 1 && mb == m - 1); };
      auto reload = [&](int st, int mb) { list.push_back(with_segment(Action::make(st, Op::RELOAD, mb), st / p)); };
      // The previous iteration's deferred shares, launched together in segment order
      // (Algorithm 2, lines 11-13): segment k's runs beside the forwards of segments before k,
      // and segment k's first forward waits for it (schedules/buckets.h, deferred_reductions).
      for (int k = 0; k < ns; ++k) list.push_back(reduce(k * p + rank, k, rho));
      for (int k = 0; k < ns; ++k) {
        int st = k * p + rank;
        for (int mb = 0; mb < m; ++mb) {
          list.push_back(with_segment(Action::make(st, Op::F, mb), k));
          // The last forward's checkpoint is needed first: it stays on the GPU.
          if (offloaded(st, mb)) list.push_back(with_segment(Action::make(st, Op::OFFLOAD, mb), k));
        }
      }
      if (offloaded(bwd[0].first, bwd[0].second)) reload(bwd[0].first, bwd[0].second);
      for (size_t i = 0; i < bwd.size(); ++i) {
        auto [st, mb] = bwd[i];
        int k = st / p;
        // Prefetch the next backward's checkpoint while this one computes.
        if (i + 1 < bwd.size() && offloaded(bwd[i + 1].first, bwd[i + 1].second)) reload(bwd[i + 1].first, bwd[i + 1].second);
        if (recompute) list.push_back(with_segment(Action::make(st, Op::R, mb), k));
        list.push_back(with_segment(Action::make(st, Op::B, mb), k));
        if (mb == m - 1) list.push_back(reduce(st, k, 1 - rho));
      }
    }
    s.params["segments"] = ns;
    s.params["offload"] = offload_k > 0;
    s.params["offload_segments"] = offload_k;
    s.params["recompute"] = recompute;
    s.params["fwd_bwd_ratio"] = r;
    s.params["deferred_reduce_share"] = rho;
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
