// Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys 2023; PyTorch's
// ScheduleLoopedBFS): v stages per rank in loop placement; a rank runs all microbatches
// through its first stage, then its second, ...; then the backwards in reverse stage order.
#include "schedules/registry.h"

namespace stagecraft::schedules {

GeneratorInfo looped_bfs_generator() {
  GeneratorInfo g;
  g.name = "looped-bfs";
  g.aliases = {"breadth-first", "scheduleloopedbfs"};
  g.summary = "breadth-first over v looped stages per rank";
  g.source = "Lamy-Poirier, Breadth-First Pipeline Parallelism, MLSys 2023; PyTorch ScheduleLoopedBFS";
  g.params = {"ranks", "microbatches", "chunks"};
  g.constraints = "chunks >= 1 (default 2), microbatches >= 1";
  g.check = [](const GeneratorOptions& o) {
    constraint::looped_stages("looped-bfs", o);
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, v = o.chunks == 0 ? 2 : o.chunks;
    Schedule s = make_schedule("looped-bfs", p, p * v, m, PlacementKind::Loop);
    s.params["chunks"] = v;
    s.params["eager_grad_reduce"] = true;  // breadth-first: a looped stage's reduction overlaps the rest
    for (int r = 0; r < p; ++r) {
      auto& list = s.actions[static_cast<size_t>(r)];
      for (int c = 0; c < v; ++c)
        for (int mb = 0; mb < m; ++mb) list.push_back(Action::make(c * p + r, Op::F, mb));
      for (int c = v - 1; c >= 0; --c)
        for (int mb = m - 1; mb >= 0; --mb) list.push_back(Action::make(c * p + r, Op::B, mb));
    }
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
