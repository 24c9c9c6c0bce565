// Simulate what differs, once: data-parallel replicas that run the same actions on copies of
// the same links behave alike, so the simulator runs the first dp' of the plan's dp replicas
// (whole nodes of them) and prices each data-parallel collective for the whole group: its step
// count, bytes per step and latency chain are those of dp members, its flows run between the
// dp' simulated ones. Every link a simulated flow crosses (a GPU's port, a node's NICs, its
// host link) carries in the reduced run exactly what it carries in the full one, so contention
// there is charged in full; only the fat tree's leaf uplinks carry less, and on the built
// platforms those never bound a flow (full bisection: a leaf's uplink has the capacity of the
// NICs under it). docs/sim.md, "Symmetry".
//
// Internal to sim/ (no SimGrid types).
#pragma once

#include <string>

#include "costmodel/specs.h"
#include "costmodel/topology.h"
#include "schedules/schedule.h"
#include "sim/simulate.h"
#include "sim/whatif.h"
#include "sim/workload.h"

namespace stagecraft::sim {

struct Symmetry {
  int dp_simulated = 1;      // data-parallel replicas simulated: the plan's dp when nothing is reduced
  int copies = 1;            // replicas each simulated one stands for: plan.dp / dp_simulated
  std::string full_because;  // why every replica is simulated, when the plan has several (else empty)
};

// Smallest dp' that divides plan.dp (and is a multiple of plan.ep) such that
//  - every node holds GPUs of one block of dp' consecutive replicas only;
//  - replica d + k dp' sits on a copy of replica d's node, at the same local GPU indices
//    (so the same NICs, ports and host links), for every k;
//  - every data-parallel group (and expert-data-parallel group) of the first block spans its
//    nodes as the whole group does (same GPUs per node; at least 2 of the whole group's N nodes,
//    and min(N, 5) where one of its all-reduces takes NCCL's tree (costmodel's choice for its
//    bytes), so that the double binary tree's busiest node is in it).
// Falls back to plan.dp (with the reason) for a platform file, a node used in part, or a
// placement without such a block; SimOptions::symmetry false asks for the full simulation.
Symmetry find_symmetry(const schedules::Schedule& s, const costmodel::ClusterSpec& cl, const costmodel::Topology& topo,
                       const costmodel::ParallelPlan& p, const Workload& w, const SimOptions& opt);

// The replicas a what-if simulates: the blocks of `base` (blocks of base.dp_simulated replicas)
// holding a GPU or NIC that differs, in the plan's order, plus the first block holding none,
// which stands for every identical block; every replica where no block is left identical. The
// simulated replicas are the first dp_simulated of the topology (the platform is built for
// them): simulated replica i runs what the plan's replica `replica_of[i]` runs, on copies of its
// links (blocks_repeat). A data-parallel collective is priced for the plan's whole group.
struct WhatIfBlocks {
  Symmetry sym;                 // dp_simulated: blocks x block size; copies 1 where blocks differ
  std::vector<int> replica_of;  // (dp_simulated) the plan's dp index of each simulated replica
  std::vector<int> image_gpu;   // (the plan's GPUs) the simulated GPU standing for each; -1 none
};
WhatIfBlocks whatif_blocks(const Symmetry& base, const Resolved& r, const costmodel::ClusterSpec& cl,
                           const costmodel::Topology& topo, const costmodel::ParallelPlan& p);

}  // namespace stagecraft::sim
