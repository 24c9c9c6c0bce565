// What the simulator moves: the bytes of every flow, as the cost table carries them from the
// workload (costmodel/workload.h, costs.h: send, gradient, gather, offload and tensor-parallel
// bytes), never worked back out of seconds. A cost table without bytes (unit costs) moves
// nothing: its transfers take no time in the simulator. Where a profile measured a send, the
// dense gradient reduction or the tp collective, the flow carries its bytes times the measured
// over the analytic time (StageCost::send_f_scale, ...), so that the measured time reaches the
// simulator and contention still slows it as it would those bytes.
#pragma once

#include <vector>

#include "costmodel/costs.h"
#include "costmodel/topology.h"
#include "schedules/schedule.h"

namespace stagecraft::sim {

struct Workload {
  std::vector<double> send_f_bytes;  // (stages) per GPU, forward output to the next stage
  std::vector<double> send_b_bytes;  // (stages) per GPU, input gradient to the previous stage
  std::vector<double> reduce_bytes;  // (stages) per GPU, the gradient buffer of the dp ring (the routed
                                     // experts' apart)
  std::vector<double> expert_reduce_bytes;  // (stages) per GPU, the routed experts' gradients, reduced
                                     // after the rest on each expert-data-parallel group (costmodel/moe.h)
  int ep = 1;                        // expert-parallel degree: those groups are dp ranks ep apart
  std::vector<double> replica_reduce_bytes;  // (stages) per GPU, hybrid sharding (zero 3 with a shard
                                     // group): the shard's gradients all-reduced over its copies
                                     // (costmodel/fsdp.h), after the dense reduction
  int replica_stride = 0;            // the shard group: the copies are dp ranks that far apart
  bool reduce_scatter = false;       // distributed optimizer: REDUCE_GRAD reduce-scatters the buffer
  std::vector<double> gather_bytes;  // (ranks) per GPU, parameters all-gathered after the optimizer
                                     // step (distributed optimizer; else 0)
  std::vector<double> gather_head_share;  // (ranks) share of the gather the next compute waits for
                                          // (CostTable::param_gather_head_share)
  std::vector<double> copy_bytes;    // (stages) per GPU, one microbatch's offload (and reload)
  std::vector<double> tp_bytes;      // (stages) per GPU, the buffer of one tensor-parallel all-reduce
  double tp_alpha_s = 0;             // latency of one tensor-parallel ring step
  // Expert parallelism's all-to-alls (costmodel/moe.h) as flows among each ep group's members (ep
  // consecutive dp indices), where those groups lie along dp (etp 0; a2a_f empty otherwise):
  std::vector<double> a2a_f, a2a_b;  // (stages) all-to-alls in one microbatch's forward, in its backward
  std::vector<double> a2a_intra_bytes, a2a_cross_bytes;  // (stages) one all-to-all out of one GPU, inside
                                     // its node and across (AllToAllBytes)
  std::vector<double> a2a_s;         // (stages) one all-to-all's seconds as the cost table prices it
  costmodel::AllReducePath a2a_path; // the ep group's links (Topology::allreduce_path(kDpCp, ep, 1))
  int gpu_sms = 0;                   // ClusterSpec::gpu_sms: an overlapped pair's compute beside its
                                     // all-to-alls (costmodel/overlapped_pair.h)
  // Context parallelism's ring (costmodel/cp.h; set_context_parallel): each cp rank's key/value
  // chunks (and their gradients) to the next cp rank, beside the compute.
  int cp = 1;                        // cp ranks per ring
  int cp_stride = 1;                 // replicas (dp x cp indices) between ring neighbours: 1 where cp is
                                     // the faster of the two axes, dp otherwise
  std::vector<double> cp_ring_f_bytes, cp_ring_b_bytes;  // (stages) one microbatch's F, B (or I), per GPU
};

// The ring of a plan with cp > 1 (`plan` as estimated, before the simulator joins dp and cp).
void set_context_parallel(Workload& w, const costmodel::CostTable& c, const costmodel::ParallelPlan& plan);

// Throws InputError when the cost table does not match the schedule.
Workload derive_workload(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                         const costmodel::ParallelPlan& p);

}  // namespace stagecraft::sim
