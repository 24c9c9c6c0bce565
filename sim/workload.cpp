#include "sim/workload.h"

#include <algorithm>
#include <string>

#include "costmodel/fsdp.h"
#include "costmodel/moe.h"
#include "schedules/error.h"

namespace stagecraft::sim {

Workload derive_workload(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                         const costmodel::ParallelPlan& p) {
  const size_t n = static_cast<size_t>(s.num_stages);
  if (c.stages.size() != n)
    throw InputError("simulator: cost table has " + std::to_string(c.stages.size()) + " stages; schedule '" + s.name + "' has " +
                     std::to_string(n));
  if (costmodel::expert_axis(p) == costmodel::kTpDpCp && costmodel::expert_data_parallel(p) > 1)
    throw InputError("simulator: plan.etp = 1 with " + std::to_string(costmodel::expert_data_parallel(p)) +
                     " copies of each expert: their gradient groups cross the tensor-parallel lanes, which are not "
                     "simulated yet (allowed: etp 0, or ep = tp x dp; estimate and plan price it)");
  if (p.ep > 1 && p.zero >= 1 && costmodel::expert_data_parallel(p) > 1)
    throw InputError("simulator: plan.ep = " + std::to_string(p.ep) + " with zero = " + std::to_string(p.zero) +
                     ": the experts' gathers over the expert-data-parallel group are not simulated yet (allowed: zero 0, "
                     "or ep = dp; estimate and plan price it)");
  Workload w;
  w.ep = p.ep;
  const int shard = costmodel::shard_degree(p);
  const bool hybrid = p.zero == 3 && shard < p.dp;
  w.replica_stride = hybrid ? shard : 0;
  for (const costmodel::StageCost& sc : c.stages) {
    // Measured collectives (a profile's) take their measured time on an idle link: their flows
    // carry the bytes times measured over analytic time (StageCost's scales; 1 when analytic).
    w.send_f_bytes.push_back(sc.send_f_scale * sc.send_f_bytes);
    w.send_b_bytes.push_back(sc.send_b_scale * sc.send_b_bytes);
    // Zero 3 reduce-scatters inside each backward (in the stage's durations, costmodel/fsdp.h):
    // nothing is left for the iteration's end.
    const bool reduced = p.dp * s.num_chains > 1 && p.zero != 3;
    w.reduce_bytes.push_back(reduced ? sc.reduce_grad_scale * (sc.grad_bytes - sc.expert_grad_bytes) : 0.0);
    w.expert_reduce_bytes.push_back(reduced ? sc.expert_grad_bytes : 0.0);
    w.replica_reduce_bytes.push_back(hybrid ? sc.reduce_grad_scale * (sc.grad_bytes - sc.expert_grad_bytes) / shard : 0.0);
    w.copy_bytes.push_back(sc.act_bytes);
    w.tp_bytes.push_back(sc.tp_allreduces_f > 0 ? sc.tp_scale * sc.tp_allreduce_bytes : 0.0);
  }
  w.reduce_scatter = costmodel::gathers_after_step(p);
  w.gather_bytes.assign(static_cast<size_t>(s.num_ranks), 0.0);
  w.gather_head_share.assign(static_cast<size_t>(s.num_ranks), 1.0);
  for (size_t r = 0; r < w.gather_bytes.size() && c.param_gather_bytes.size() == w.gather_bytes.size(); ++r) {
    w.gather_bytes[r] = p.dp > 1 ? c.param_gather_bytes[r] : 0.0;
    if (c.param_gather_head_share.size() == w.gather_bytes.size()) w.gather_head_share[r] = c.param_gather_head_share[r];
  }
  const costmodel::Topology topo(cl, p);
  w.tp_alpha_s = topo.group_link(costmodel::kTp).latency_s;
  if (p.ep > 1 && costmodel::expert_axis(p) == costmodel::kDpCp) {
    w.a2a_path = topo.allreduce_path(costmodel::kDpCp, p.ep, 1);
    w.gpu_sms = cl.gpu_sms;
    for (const costmodel::StageCost& sc : c.stages) {
      const costmodel::MoeLayer& l = sc.moe.layer;
      const double per_microbatch = static_cast<double>(sc.moe.moe_layers) * std::max(1, sc.inner.sub_batches);
      w.a2a_f.push_back(per_microbatch * l.all_to_alls_f);
      w.a2a_b.push_back(per_microbatch * l.all_to_alls_b);
      w.a2a_intra_bytes.push_back(l.bytes.intra_node_bytes);
      w.a2a_cross_bytes.push_back(l.bytes.cross_node_bytes);
      w.a2a_s.push_back(l.all_to_all_s);
    }
  }
  return w;
}

void set_context_parallel(Workload& w, const costmodel::CostTable& c, const costmodel::ParallelPlan& plan) {
  if (plan.cp < 2) return;
  w.cp = plan.cp;
  w.cp_stride = costmodel::cp_before_dp(costmodel::rank_axes(plan.rank_order)) ? 1 : plan.dp;
  for (const costmodel::StageCost& sc : c.stages) {
    const double per_microbatch = static_cast<double>(sc.layers) * std::max(1, sc.inner.sub_batches);
    w.cp_ring_f_bytes.push_back(per_microbatch * sc.cp.exchanges_f * sc.cp.chunk_bytes);
    w.cp_ring_b_bytes.push_back(per_microbatch * sc.cp.exchanges_b * sc.cp.chunk_bytes);
  }
}

}  // namespace stagecraft::sim
