// Interleaved 1F1B (Megatron-LM virtual pipeline stages, Narayanan et al., SC 2021, Sec. 2.2):
// v chunks per rank, p*v stages in loop placement (stage c*p + r on rank r). The forward and
// backward order of "virtual microbatches" follows Megatron-LM's
// forward_backward_pipelining_with_interleaving: warm-up (p-r-1)*2 + (v-1)*p, then 1F1B.
#include <algorithm>

#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

// Virtual microbatch k of rank r -> (stage, microbatch), forward or backward order.
Action virtual_action(int k, int r, int p, int v, bool forward) {
  int group = k % (p * v);
  int chunk = group / p;
  if (!forward) chunk = v - 1 - chunk;
  int mb = (k / (p * v)) * p + k % p;
  return Action::make(chunk * p + r, forward ? Op::F : Op::B, mb);
}

}  // namespace

GeneratorInfo interleaved_1f1b_generator() {
  GeneratorInfo g;
  g.name = "interleaved-1f1b";
  g.aliases = {"interleaved", "megatron-interleaved", "scheduleinterleaved1f1b", "virtual-pipeline"};
  g.summary = "1F1B over v model chunks per rank (Megatron-LM virtual pipeline stages)";
  g.source = "Narayanan et al., Megatron-LM, SC 2021, Sec. 2.2";
  g.params = {"ranks", "microbatches", "chunks"};
  g.constraints = "chunks >= 1 (default 2); microbatches a multiple of ranks (Megatron-LM's requirement)";
  g.check = [](const GeneratorOptions& o) {
    constraint::positive("interleaved-1f1b", "ranks", o.ranks);
    constraint::positive("interleaved-1f1b", "microbatches", o.microbatches);
    constraint::at_least("interleaved-1f1b", "chunks", o.chunks == 0 ? 2 : o.chunks, 1);
    constraint::multiple_of("interleaved-1f1b", "microbatches", o.microbatches, o.ranks,
                            "microbatches go through the ranks in groups of p");
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, v = o.chunks == 0 ? 2 : o.chunks;
    Schedule s = make_schedule("interleaved-1f1b", p, p * v, m, PlacementKind::Loop);
    s.params["chunks"] = v;
    const int total = m * v;
    for (int r = 0; r < p; ++r) {
      auto& list = s.actions[static_cast<size_t>(r)];
      int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      int f = 0, b = 0;
      while (f < warmup) list.push_back(virtual_action(f++, r, p, v, true));
      while (f < total) {
        list.push_back(virtual_action(f++, r, p, v, true));
        list.push_back(virtual_action(b++, r, p, v, false));
      }
      while (b < total) list.push_back(virtual_action(b++, r, p, v, false));
    }
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
