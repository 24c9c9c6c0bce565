#include "costmodel/fsdp.h"

#include <algorithm>

namespace stagecraft::costmodel {

int shard_degree(const ParallelPlan& p) {
  if (p.zero < 1) return 1;
  return p.zero == 3 && p.shard_group > 0 ? p.shard_group : p.dp * p.cp;
}

double fsdp_pass_s(const std::vector<FsdpUnit>& units) {
  // Two streams. Compute runs the units in order, each once its gather is done; the collective
  // stream takes each gather when the unit before it starts computing (the first at once) and
  // each reduce-scatter when its unit's compute ends, first come first served.
  double compute_end = 0, comm_end = 0;
  std::vector<double> gather_end(units.size(), 0.0);
  double prev_start = 0;
  // Gathers are issued one unit ahead, so a unit's gather is issued before the reduce-scatter
  // of the unit two back can be (it waits for that unit's end, later than the issue): the
  // stream's order is gather k, then reduce-scatter k - 1 once compute k - 1 ends.
  for (size_t k = 0; k < units.size(); ++k) {
    const FsdpUnit& u = units[k];
    if (u.gather_s > 0) {
      comm_end = std::max(comm_end, k == 0 ? 0.0 : prev_start) + u.gather_s;
      gather_end[k] = comm_end;
    }
    if (k > 0 && units[k - 1].scatter_s > 0) comm_end = std::max(comm_end, compute_end) + units[k - 1].scatter_s;
    const double start = std::max(compute_end, gather_end[k]);
    prev_start = start;
    compute_end = start + u.compute_s;
  }
  if (!units.empty() && units.back().scatter_s > 0) comm_end = std::max(comm_end, compute_end) + units.back().scatter_s;
  return std::max(compute_end, comm_end);
}

namespace {

double pass_exposed_s(const std::vector<FsdpUnitWork>& work, double FsdpUnitWork::*compute, bool gather, bool scatter,
                      bool reverse, const std::vector<double>& gather_s, const std::vector<double>& scatter_s) {
  std::vector<FsdpUnit> units;
  double compute_s = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    const size_t k = reverse ? work.size() - 1 - i : i;
    units.push_back({work[k].*compute, gather ? gather_s[k] : 0.0, scatter ? scatter_s[k] : 0.0});
    compute_s += work[k].*compute;
  }
  return fsdp_pass_s(units) - compute_s;
}

}  // namespace

FsdpStage fsdp_stage(const std::vector<FsdpUnitWork>& units, const ModelSpec& m, bool reshard_after_forward,
                     const CollectiveSeconds& gather_s, const CollectiveSeconds& scatter_s, double fp8_copy_bytes) {
  FsdpStage f;
  const int n = static_cast<int>(units.size());
  f.units = n;
  f.gathers_f = n;
  f.gathers_b = reshard_after_forward ? n : 0;
  f.reduce_scatters = n;
  std::vector<double> ag(units.size()), rs(units.size());
  double largest = 0, largest_bytes = 0;
  for (size_t k = 0; k < units.size(); ++k) {
    const double fp8 = units[k].fp8_params;  // 1 byte each; the rest at bytes_per_param
    const double gb = (units[k].params - fp8) * m.bytes_per_param + fp8, sb = units[k].params * grad_bytes_per_param(m);
    f.gather_bytes += gb;
    f.scatter_bytes += sb;
    ag[k] = gather_s(gb);
    rs[k] = scatter_s(sb);
    largest = std::max(largest, units[k].params);
    largest_bytes = std::max(largest_bytes, gb + units[k].fp8_params * (fp8_copy_bytes - 1));  // and its second FP8 copy
  }
  f.exposed_f_s = pass_exposed_s(units, &FsdpUnitWork::f_s, true, false, false, ag, rs);
  f.exposed_b_s = pass_exposed_s(units, &FsdpUnitWork::b_s, reshard_after_forward, true, true, ag, rs);
  f.exposed_i_s = pass_exposed_s(units, &FsdpUnitWork::i_s, reshard_after_forward, false, true, ag, rs);
  f.exposed_w_s = pass_exposed_s(units, &FsdpUnitWork::w_s, false, true, true, ag, rs);
  // Two units at once (the next one prefetched): the largest one's gathered weights (under FP8 its
  // FP8 copies) and its gradients.
  f.gathered_bytes = 2 * (largest_bytes + largest * grad_bytes_per_param(m));
  return f;
}

nlohmann::json to_json(const FsdpStage& f, int microbatches) {
  return {{"units", f.units},
          {"all_gathers_per_microbatch", f.gathers_f + f.gathers_b},
          {"reduce_scatters_per_microbatch", f.reduce_scatters},
          {"all_gathers_per_iteration", (f.gathers_f + f.gathers_b) * microbatches},
          {"reduce_scatters_per_iteration", f.reduce_scatters * microbatches},
          {"gather_bytes_per_pass", f.gather_bytes},
          {"reduce_scatter_bytes_per_backward", f.scatter_bytes},
          {"exposed_forward_s", f.exposed_f_s},
          {"exposed_backward_s", f.exposed_b_s},
          {"gathered_bytes", f.gathered_bytes}};
}

}  // namespace stagecraft::costmodel
