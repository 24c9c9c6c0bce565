// Merak (Lai et al., TPDS 2023), Sec. 5.1 and 5.2.
//
// merak-early-recompute: 1F1B with each stage's recomputation R placed before the receive of
// its gradient (R, RECV_B, B), so it runs while the gradient is on its way (Merak Fig. 3b,
// after GPipe's observation that recomputation does not depend on the next stage). With
// T_F : T_R : T_B = 1 : 1 : 2 the bubble over compute is 3(p-1)/(4m).
//
// merak (the shifted critical path schedule, Fig. 3c): the last stage never recomputes (it
// holds one microbatch anyway), and every other stage runs one more forward before its first
// backward than 1F1B does, so the penultimate stage is never starved and becomes the critical
// path: bubble over compute 3(p-2)/(4m). Needs at least 4 microbatches.
//
// Stage-aware recomputation (Sec. 5.2): stage i (0-based) keeps a share alpha_i of its layers
// un-recomputed with (p-1-i) alpha_i = (p-1) alpha_0, capped at 1 (the memory of the extra
// activations is then equal on every stage); R carries the recomputed share 1 - alpha_i.
// --alpha1 gives alpha_0 (the paper's alpha_1); costmodel resolves "auto" to the largest
// value that fits device memory.
#include <algorithm>
#include <cmath>

#include "schedules/error.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

// Recomputed share of each stage from alpha_0; the last stage never recomputes.
std::vector<double> recompute_fractions(int p, double alpha0) {
  std::vector<double> f(static_cast<size_t>(p), 0.0);
  for (int i = 0; i + 1 < p; ++i) {
    double alpha = std::min(1.0, alpha0 * (p - 1) / static_cast<double>(p - 1 - i));
    f[static_cast<size_t>(i)] = 1.0 - alpha;
  }
  return f;
}

// alpha1 from the options: absent -> `fallback` (< 0: none given); a number in [0, 1].
double alpha1_of(const GeneratorOptions& o, const char* name, double fallback) {
  if (!o.extra.contains("alpha1")) return fallback;
  const auto& v = o.extra["alpha1"];
  if (v.is_string() && v.get<std::string>() == "auto")
    throw InputError(std::string("schedule ") + name +
                     ": alpha1 = \"auto\" needs a model and a cluster to size memory (use estimate or compare); "
                     "give a number in [0, 1] here");
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1)
    throw InputError(std::string("schedule ") + name + ": alpha1 = " + v.dump() + " is invalid (expected a number in [0, 1] or \"auto\")");
  return v.get<double>();
}

void push_r(std::vector<Action>& list, int stage, int mb, double fraction) {
  if (fraction <= 0) return;
  Action r = Action::make(stage, Op::R, mb);
  r.fraction = fraction;
  list.push_back(r);
}

// One rank: `ahead` forwards before the first backward, then forward / (R, B) pairs.
void one_rank(std::vector<Action>& list, int stage, int m, int ahead, double frac) {
  int f = 0, b = 0;
  ahead = std::min(ahead, m);
  while (f < ahead) list.push_back(Action::make(stage, Op::F, f++));
  while (b < m) {
    push_r(list, stage, b, frac);
    list.push_back(Action::make(stage, Op::B, b++));
    if (f < m) list.push_back(Action::make(stage, Op::F, f++));
  }
}

// The two schedules differ only in their name, alpha1's default `alpha1_default` (< 0: every
// stage fully recomputed), the checks beyond the common ones (`extra_check`) and how many
// forwards rank r of p runs before its first backward (`ahead`).
GeneratorInfo merak_family(const char* name, double alpha1_default, void (*extra_check)(const GeneratorOptions&),
                           int (*ahead)(int p, int r)) {
  GeneratorInfo g;
  g.name = name;
  g.params = {"ranks", "microbatches", "alpha1"};
  g.owns_recompute = true;
  g.check = [=](const GeneratorOptions& o) {
    constraint::one_stage_per_rank(name, o);
    extra_check(o);
    alpha1_of(o, name, alpha1_default);
  };
  g.build = [=](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    double a = alpha1_of(o, name, alpha1_default);
    std::vector<double> frac = a < 0 ? std::vector<double>(static_cast<size_t>(p), 1.0) : recompute_fractions(p, a);
    Schedule s = make_schedule(name, p, p, m, PlacementKind::Loop);
    for (int r = 0; r < p; ++r) one_rank(s.actions[static_cast<size_t>(r)], r, m, ahead(p, r), frac[static_cast<size_t>(r)]);
    s.params["recompute_timing"] = "early";
    if (a >= 0) s.params["alpha1"] = a;
    s.params["recompute_fractions"] = frac;
    return s;
  };
  return g;
}

}  // namespace

GeneratorInfo merak_early_recompute_generator() {
  // 1F1B's warm-up: rank r runs p - r forwards ahead.
  GeneratorInfo g = merak_family("merak-early-recompute", -1, [](const GeneratorOptions&) {}, [](int p, int r) { return p - r; });
  g.aliases = {"merak-1f1b", "early-recompute"};
  g.summary = "1F1B with recomputation before the gradient arrives (R before RECV_B)";
  g.source = "Lai et al., Merak, TPDS 2023, Sec. 5.1, Fig. 3b";
  g.constraints = "microbatches >= 1, no chunks; alpha1 in [0, 1] (absent: every stage fully recomputed)";
  return g;
}

GeneratorInfo merak_generator() {
  // One forward more than 1F1B ahead, but the last stage's single one.
  GeneratorInfo g = merak_family(
      "merak", 0,
      [](const GeneratorOptions& o) {
        constraint::at_least("merak", "ranks", o.ranks, 2, "the critical path shifts to the penultimate stage");
        constraint::at_least("merak", "microbatches", o.microbatches, 4, "the shifted critical path schedule needs at least 4 (Merak Sec. 5.1)");
      },
      [](int p, int r) { return r == p - 1 ? 1 : p - r + 1; });
  g.aliases = {"merak-shifted", "shifted-critical-path"};
  g.summary = "Merak's shifted critical path: no recompute on the last stage, one forward ahead elsewhere";
  g.source = "Lai et al., Merak, TPDS 2023, Sec. 5.1 (Fig. 3c) and 5.2";
  g.constraints = "ranks >= 2, microbatches >= 4 (Merak Sec. 5.1), no chunks; alpha1 in [0, 1] (default 0: full recompute but the last stage)";
  return g;
}

}  // namespace stagecraft::schedules
