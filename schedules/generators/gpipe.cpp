// GPipe (Huang et al., NeurIPS 2019): every microbatch's forward, then every backward.
// Stage s on rank s; each rank holds all m microbatches' activations at the peak.
#include "schedules/registry.h"

namespace stagecraft::schedules {

GeneratorInfo gpipe_generator() {
  GeneratorInfo g;
  g.name = "gpipe";
  g.summary = "all forwards, then all backwards; one stage per rank";
  g.source = "Huang et al., GPipe, NeurIPS 2019";
  g.params = {"ranks", "microbatches"};
  g.constraints = "ranks >= 1, microbatches >= 1, no chunks";
  g.check = [](const GeneratorOptions& o) {
    constraint::one_stage_per_rank("gpipe", o);
  };
  g.build = [](const GeneratorOptions& o) {
    Schedule s = make_schedule("gpipe", o.ranks, o.ranks, o.microbatches, PlacementKind::Loop);
    for (int r = 0; r < o.ranks; ++r) {
      auto& list = s.actions[static_cast<size_t>(r)];
      for (int mb = 0; mb < o.microbatches; ++mb) list.push_back(Action::make(r, Op::F, mb));
      for (int mb = 0; mb < o.microbatches; ++mb) list.push_back(Action::make(r, Op::B, mb));
    }
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
