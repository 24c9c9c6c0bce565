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

void check_common(const char* name, const GeneratorOptions& o) {
  constraint::positive(name, "ranks", o.ranks);
  constraint::positive(name, "microbatches", o.microbatches);
  constraint::no_chunks(name, o);
}

}  // namespace

GeneratorInfo merak_early_recompute_generator() {
  GeneratorInfo g;
  g.name = "merak-early-recompute";
  g.aliases = {"merak-1f1b", "early-recompute"};
  g.summary = "1F1B with recomputation before the gradient arrives (R before RECV_B)";
  g.source = "Lai et al., Merak, TPDS 2023, Sec. 5.1, Fig. 3b";
  g.params = {"ranks", "microbatches", "alpha1"};
  g.owns_recompute = true;
  g.constraints = "microbatches >= 1, no chunks; alpha1 in [0, 1] (absent: every stage fully recomputed)";
  g.check = [](const GeneratorOptions& o) {
    check_common("merak-early-recompute", o);
    alpha1_of(o, "merak-early-recompute", -1);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    double a = alpha1_of(o, "merak-early-recompute", -1);
    std::vector<double> frac = a < 0 ? std::vector<double>(static_cast<size_t>(p), 1.0) : recompute_fractions(p, a);
    Schedule s = make_schedule("merak-early-recompute", p, p, m, PlacementKind::Loop);
    for (int r = 0; r < p; ++r) one_rank(s.actions[static_cast<size_t>(r)], r, m, p - r, frac[static_cast<size_t>(r)]);
    s.params["recompute_timing"] = "early";
    if (a >= 0) s.params["alpha1"] = a;
    s.params["recompute_fractions"] = frac;
    return s;
  };
  return g;
}

GeneratorInfo merak_generator() {
  GeneratorInfo g;
  g.name = "merak";
  g.aliases = {"merak-shifted", "shifted-critical-path"};
  g.summary = "Merak's shifted critical path: no recompute on the last stage, one forward ahead elsewhere";
  g.source = "Lai et al., Merak, TPDS 2023, Sec. 5.1 (Fig. 3c) and 5.2";
  g.params = {"ranks", "microbatches", "alpha1"};
  g.owns_recompute = true;
  g.constraints = "ranks >= 2, microbatches >= 4 (Merak Sec. 5.1), no chunks; alpha1 in [0, 1] (default 0: full recompute but the last stage)";
  g.check = [](const GeneratorOptions& o) {
    check_common("merak", o);
    constraint::at_least("merak", "ranks", o.ranks, 2, "the critical path shifts to the penultimate stage");
    constraint::at_least("merak", "microbatches", o.microbatches, 4, "the shifted critical path schedule needs at least 4 (Merak Sec. 5.1)");
    alpha1_of(o, "merak", 0);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    double a = alpha1_of(o, "merak", 0);
    std::vector<double> frac = recompute_fractions(p, a);
    Schedule s = make_schedule("merak", p, p, m, PlacementKind::Loop);
    for (int r = 0; r < p; ++r) {
      int ahead = r == p - 1 ? 1 : p - r + 1;
      one_rank(s.actions[static_cast<size_t>(r)], r, m, ahead, frac[static_cast<size_t>(r)]);
    }
    s.params["recompute_timing"] = "early";
    s.params["alpha1"] = a;
    s.params["recompute_fractions"] = frac;
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
