#include "sim/workload.h"

#include <string>

#include "schedules/error.h"

namespace stagecraft::sim {

using costmodel::Link;

namespace {

double p2p_bytes(double time_s, const Link& l, int stage, const char* field) {
  if (time_s <= 0 || l.kind == "self") return 0;
  double bytes = (time_s - l.latency_s) * l.bandwidth_Bps;
  if (bytes < 0)
    throw InputError("simulator: cost table stage " + std::to_string(stage) + " " + field + " = " + std::to_string(time_s) +
                     " s is shorter than the link latency " + std::to_string(l.latency_s) + " s (must be at least it)");
  return bytes;
}

// Inverse of ring_allreduce_s: t = 2(n-1)/n * S/B + 2(n-1) alpha.
double ring_bytes(double time_s, int n, const Link& l, int stage, const char* field) {
  if (time_s <= 0 || n <= 1) return 0;
  double steps = 2.0 * (n - 1);
  double bytes = (time_s - steps * l.latency_s) * l.bandwidth_Bps * n / steps;
  if (bytes < 0)
    throw InputError("simulator: cost table stage " + std::to_string(stage) + " " + field + " = " + std::to_string(time_s) +
                     " s is shorter than the ring's latency " + std::to_string(steps * l.latency_s) + " s");
  return bytes;
}

// Inverse of costmodel::allreduce_s on the path the evaluator priced the reduction on: the
// buffer is the same whichever algorithm the simulator then runs (SimOptions::hierarchical_dp).
// `halves` = 2 for a reduce-scatter or an all-gather (half the all-reduce); `what` names the
// cost table field for errors.
double allreduce_bytes_of(double time_s, int halves, const costmodel::AllReducePath& path, const std::string& what) {
  if (time_s <= 0 || path.ranks <= 1) return 0;
  const bool tree = halves == 1;  // NCCL runs reduce-scatter and all-gather as rings only
  double bytes = costmodel::allreduce_bytes(halves * time_s, path, tree);
  if (bytes < 0)
    throw InputError("simulator: cost table " + what + " = " + std::to_string(time_s) + " s is shorter than its collective's latency " +
                     std::to_string(costmodel::allreduce_latency_s(path, tree) / halves) + " s (must be at least it)");
  return bytes;
}

}  // namespace

Workload derive_workload(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                         const costmodel::ParallelPlan& p) {
  costmodel::Topology topo(cl, p);
  const size_t n = static_cast<size_t>(s.num_stages);
  Workload w;
  w.send_f_bytes.assign(n, 0);
  w.send_b_bytes.assign(n, 0);
  w.reduce_bytes.assign(n, 0);
  w.copy_bytes.assign(n, 0);
  w.tp_bytes.assign(n, 0);
  const Link dp = topo.group_link(costmodel::kDp);
  const Link tp_link = topo.group_link(costmodel::kTp);
  w.reduce_scatter = p.zero >= 1;
  w.gather_bytes.assign(static_cast<size_t>(s.num_ranks), 0);
  for (int r = 0; r < s.num_ranks && static_cast<int>(c.param_gather_s.size()) == s.num_ranks; ++r)
    w.gather_bytes[static_cast<size_t>(r)] =
        allreduce_bytes_of(c.param_gather_s[static_cast<size_t>(r)], 2, topo.allreduce_path(costmodel::kDp),
                           "rank " + std::to_string(r) + " param_gather_s");
  for (int st = 0; st < s.num_stages; ++st) {
    const auto& sc = c.stages[static_cast<size_t>(st)];
    int nx = s.next_stage(st), pv = s.prev_stage(st);
    if (nx >= 0) w.send_f_bytes[static_cast<size_t>(st)] = p2p_bytes(sc.send_f_s, topo.p2p_link(s.rank_of(st), s.rank_of(nx)), st, "send_f_s");
    if (pv >= 0) w.send_b_bytes[static_cast<size_t>(st)] = p2p_bytes(sc.send_b_s, topo.p2p_link(s.rank_of(st), s.rank_of(pv)), st, "send_b_s");
    // A reduce-scatter (distributed optimizer) is half of the all-reduce form (costmodel/comm.h).
    w.reduce_bytes[static_cast<size_t>(st)] =
        s.num_chains == 1 ? allreduce_bytes_of(sc.reduce_grad_s, w.reduce_scatter ? 2 : 1, topo.allreduce_path(costmodel::kDp),
                                               "stage " + std::to_string(st) + " reduce_grad_s")
                          : ring_bytes(sc.reduce_grad_s, p.dp * s.num_chains, costmodel::chain_reduce_link(s, st, topo, dp), st, "reduce_grad_s");
    // One tp all-reduce: the forward's tp time over its count (measured or analytic alike).
    if (sc.tp_allreduces_f > 0)
      w.tp_bytes[static_cast<size_t>(st)] =
          ring_bytes(sc.tp_comm_f_s / sc.tp_allreduces_f, p.tp, tp_link, st, "tp_comm_f_s / tp_allreduces_f");
    w.copy_bytes[static_cast<size_t>(st)] = sc.offload_s * cl.host_link_bandwidth_Bps;
  }
  w.tp_alpha_s = tp_link.latency_s;
  return w;
}

}  // namespace stagecraft::sim
