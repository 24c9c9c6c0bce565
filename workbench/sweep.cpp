#include "workbench/sweep.h"

#include "workbench/space.h"

namespace stagecraft::workbench {

std::vector<SweepRow> sweep(const SearchInputs& in, const SearchRequest& q, const ProgressFor& progress) {
  std::vector<SweepRow> rows;
  planner::SearchOptions opt;
  opt.top_k = 1;
  opt.threads = q.threads;
  for (int n : in.counts) {
    opt.progress = progress ? progress(n) : ProgressFn{};
    const planner::SearchResult r = search_route(in, space_of(q, in.global_batch, n), opt);
    SweepRow row;
    row.gpus = n;
    if (!r.best.empty()) {
      const planner::Candidate& b = r.best.front();
      row.best = b;
      row.tokens_per_gpu_hour = b.tokens_per_s * 3600 / n;
      row.train_s = q.tokens > 0 ? q.tokens / b.tokens_per_s : 0;
      row.gpu_hours = n * row.train_s / 3600;
      row.search_s = r.stats.seconds;
    }
    rows.push_back(row);
  }
  return rows;
}

SweepChoice sweep_choice(const std::vector<SweepRow>& rows) {
  SweepChoice c;
  for (const SweepRow& row : rows) {
    if (!row.best) continue;
    if (row.tokens_per_gpu_hour > c.tokens_per_gpu_hour) c.tokens_per_gpu_hour = row.tokens_per_gpu_hour, c.cheapest_gpus = row.gpus;
    if (row.best->tokens_per_s > c.tokens_per_s) c.tokens_per_s = row.best->tokens_per_s, c.fastest_gpus = row.gpus;
  }
  return c;
}

}  // namespace stagecraft::workbench
