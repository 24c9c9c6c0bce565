// 1F1B, the PipeDream-flush / DAPPLE schedule (Narayanan et al., SC 2021; Fan et al., PPoPP
// 2021): rank r runs p-1-r warm-up forwards, then alternates one forward and one backward,
// then drains the remaining backwards. Stage r on rank r holds at most p-r microbatches.
#include <algorithm>

#include "schedules/registry.h"

namespace stagecraft::schedules {

GeneratorInfo one_f_one_b_generator() {
  GeneratorInfo g;
  g.name = "1f1b";
  g.aliases = {"pipedream-flush", "dapple", "schedule1f1b"};
  g.summary = "warm-up forwards, then one forward one backward, then the remaining backwards";
  g.source = "PipeDream-flush (Narayanan et al., SC 2021), DAPPLE (Fan et al., PPoPP 2021)";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks >= 1, microbatches >= 1, no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::one_stage_per_rank("1f1b", o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches;
    Schedule s = make_schedule("1f1b", p, p, m, PlacementKind::Loop);
    for (int r = 0; r < p; ++r) {
      auto& list = s.actions[static_cast<size_t>(r)];
      int warmup = std::min(p - 1 - r, m), f = 0, b = 0;
      while (f < warmup) list.push_back(Action::make(r, Op::F, f++));
      while (f < m) {
        list.push_back(Action::make(r, Op::F, f++));
        list.push_back(Action::make(r, Op::B, b++));
      }
      while (b < m) list.push_back(Action::make(r, Op::B, b++));
    }
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
