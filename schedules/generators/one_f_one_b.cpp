// 1F1B, the PipeDream-flush / DAPPLE schedule (Narayanan et al., SC 2021; Fan et al., PPoPP
// 2021): rank r runs p-1-r warm-up forwards, then alternates one forward and one backward,
// then drains the remaining backwards. Stage r on rank r holds at most p-r microbatches.
// With a2a_overlap (registry.h, Megatron-Core's combined 1F1B; one rank only, as Megatron-Core
// pairs a pipeline's passes only with interleaving) each forward after the first runs with the
// backward of the microbatch before it as one OVERLAP_F_B.
#include <algorithm>

#include "schedules/error.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {

GeneratorInfo one_f_one_b_generator() {
  GeneratorInfo g;
  g.name = "1f1b";
  g.aliases = {"pipedream-flush", "dapple", "schedule1f1b"};
  g.summary = "warm-up forwards, then one forward one backward, then the remaining backwards";
  g.source = "PipeDream-flush (Narayanan et al., SC 2021), DAPPLE (Fan et al., PPoPP 2021)";
  g.params = {"ranks", "microbatches", kA2aOverlapKey};
  g.constraints = "ranks >= 1, microbatches >= 1, no chunks; a2a_overlap with ranks = 1 only";
  g.check = [](const GeneratorOptions& o) {
    constraint::one_stage_per_rank("1f1b", o);
    if (a2a_overlap(o, "1f1b") && o.ranks > 1)
      throw InputError(std::string("schedule 1f1b: ") + kA2aOverlapKey + " = true with ranks = " + std::to_string(o.ranks) +
                       " (allowed: ranks 1; a pipeline pairs its passes with interleaved-1f1b, as Megatron-Core does)");
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    Schedule s = make_schedule("1f1b", p, p, m, PlacementKind::Loop);
    const bool paired = a2a_overlap(o, "1f1b");
    if (paired) s.params[kA2aOverlapKey] = true;
    for (int r = 0; r < p; ++r)
      append_one_f_one_b(s.actions[static_cast<size_t>(r)], m, p - 1 - r, paired,
                         [r](int k) { return Action::make(r, Op::F, k); }, [r](int k) { return Action::make(r, Op::B, k); });
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
