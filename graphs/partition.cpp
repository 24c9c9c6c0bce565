#include "graphs/partition.h"

#include "costmodel/price.h"

#include "planner/balance.h"
#include "schedules/error.h"

namespace stagecraft::graphs {


Partition partition(const Sharding& sh, const PartitionOptions& opt, const std::vector<int>& given) {
  const size_t n = sh.subgraphs.size();
  if (opt.stages < 1 || static_cast<int>(n) < opt.stages)
    throw InputError("partition: --pp " + std::to_string(opt.stages) + " is invalid for " + std::to_string(n) +
                     " subgraphs (allowed: 1 to the number of subgraphs)");
  const double rate = opt.cluster ? costmodel::flat_rate_flops_per_s(*opt.cluster) : 1.0;
  if (!(rate > 0)) throw InputError("partition: cluster '" + opt.cluster->name + "' computes at no rate (peak or efficiency 0)");
  const double rc = opt.full_recompute ? 2 : 1;  // the forward runs twice under full recomputation
  bool all_measured = true;
  for (const Subgraph& s : sh.subgraphs) all_measured = all_measured && s.unmeasured == 0;
  if (!opt.subgraph_s.empty() && opt.subgraph_s.size() != n)
    throw Error("partition: " + std::to_string(opt.subgraph_s.size()) + " priced subgraphs for " + std::to_string(n));
  const bool by_time = opt.cluster || all_measured || !opt.subgraph_s.empty();
  // A subgraph's work: the estimate's seconds, else seconds (measured nodes by their times, the
  // rest at the rate), else FLOPs.
  auto work_of = [&](size_t i) {
    const Subgraph& s = sh.subgraphs[i];
    if (!opt.subgraph_s.empty()) return opt.subgraph_s[i];
    if (!by_time) return s.fwd_flops * rc + s.bwd_flops;
    const double priced = (s.fwd_flops - s.measured_fwd_flops) * rc + (s.bwd_flops - s.measured_bwd_flops);
    return (opt.cluster ? priced / rate : 0.0) + s.fwd_s * rc + s.bwd_s;
  };
  std::vector<double> work(n);
  for (size_t i = 0; i < n; ++i) work[i] = work_of(i);
  std::vector<int> counts = given;
  if (counts.empty()) {
    counts = planner::balance_sequence(work, opt.stages);
  } else {
    int sum = 0;
    for (int c : counts) {
      if (c < 1) throw InputError("plan.stage_layers: " + std::to_string(c) + " subgraphs in a stage is invalid (at least 1)");
      sum += c;
    }
    if (static_cast<int>(counts.size()) != opt.stages || sum != static_cast<int>(n))
      throw InputError("plan.stage_layers gives " + std::to_string(counts.size()) + " stages of " + std::to_string(sum) +
                       " subgraphs; the graph has " + std::to_string(n) + " subgraphs for " + std::to_string(opt.stages) + " stages");
  }
  Partition out;
  out.by_time = by_time;
  int first = 0;
  for (int c : counts) {
    StagePart p;
    p.first = first;
    p.count = c;
    for (int i = first; i < first + c; ++i) {
      const Subgraph& s = sh.subgraphs[static_cast<size_t>(i)];
      p.flops += s.fwd_flops * rc + s.bwd_flops;
      if (by_time) p.time_s += work[static_cast<size_t>(i)];
      p.param_bytes += s.param_bytes;
      p.act_bytes += s.act_bytes;
    }
    p.static_bytes = p.param_bytes * opt.static_bytes_per_param_byte;
    first += c;
    if (first < static_cast<int>(n)) p.send_bytes = sh.subgraphs[static_cast<size_t>(first - 1)].boundary_bytes;
    out.bottleneck = std::max(out.bottleneck, by_time ? p.time_s : p.flops);
    out.stages.push_back(p);
  }
  return out;
}

}  // namespace stagecraft::graphs
