// The simulated platform: one SimGrid host per GPU, links as the cluster describes them, and
// a host-memory endpoint per node for offload. Built from a ClusterSpec or loaded from a
// SimGrid XML file whose GPU hosts carry the property stagecraft_gpu="<global rank>"
// (docs/sim.md). Internal to sim/: includes SimGrid.
#pragma once

#include <simgrid/s4u.hpp>
#include <string>
#include <map>
#include <utility>
#include <vector>

#include "costmodel/specs.h"
#include "costmodel/topology.h"

namespace stagecraft::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;         // (num_gpus) host of each global GPU rank
  std::vector<simgrid::s4u::Host*> host_memory;  // (num_gpus) where a GPU offloads; null = none
  // (num_gpus) where each rank's compute runs where the ranks of a node share its cores
  // (ClusterSpec::cores_per_node): one host a node with that many cores, an execution using one
  // core and executions beyond the cores sharing them (SimGrid's CPU model); empty: on gpus.
  std::vector<simgrid::s4u::Host*> compute;
  // Aggregated platforms (build_unit_platform): lanes = tp, every GPU of a tensor-parallel
  // group maps to its group's host, and one flow of lanes x S bytes stands for the group's tp
  // parallel flows of S bytes; tp_peer[g] receives the group's tensor-parallel ring flow.
  int lanes = 1;
  std::vector<simgrid::s4u::Host*> tp_peer;      // (num_gpus) when lanes > 1, else empty
};

// Network model settings so simulated latency and bandwidth equal the configured ones:
// CM02 (no LV08 factors), latency and bandwidth factors 1, no TCP-gamma cap, no cross-traffic.
void configure_network();

// A what-if's NICs: node -> bandwidth factor of each of its NICs (sim/whatif.h); nodes absent
// run at nominal bandwidth. A factor 0 is a failed NIC: the GPUs using it use the node's next
// working NIC (in index order, wrapping around).
using NicFactors = std::map<int, std::vector<double>>;

struct BuildOptions {
  int fat_tree_leaf_nodes = 8;  // fat-tree: nodes under one leaf switch (full bisection uplinks)
  NicFactors nic_factor;        // degraded or failed NICs (what-ifs); empty = nominal
};

// The node-local NIC GPU g's inter-node traffic leaves by: local % nics_per_node, or the next
// working one where that NIC failed.
int routed_nic(const costmodel::ClusterSpec& c, const NicFactors& f, int g);

// Builds the platform for the GPUs `gpus` among the first num_gpus of the cluster (the plan's;
// the others get no host: Platform::gpus holds null for them). `pairs` lists every
// (source, destination) GPU pair that will exchange data: the routing table holds only those
// (plus each GPU's route to its host memory). Throws InputError for zero or negative speeds
// or bandwidths, naming the field.
Platform build_platform(const costmodel::ClusterSpec& c, int num_gpus, const std::vector<int>& gpus,
                        const std::vector<std::pair<int, int>>& pairs, const BuildOptions& opt = {});

// Whether build_unit_platform is exact for this cluster and plan: tp > 1, no fast groups,
// each tensor-parallel group inside one node, its GPUs spread evenly over its NICs, and the
// NIC sets of the groups on a node identical or disjoint (so every physical link carries the
// same share of each group's flows, and max-min sharing of the aggregated links is the same).
// NICs are those the GPUs use after a what-if's reroutes (`f`): a failed NIC whose GPUs move
// onto a NIC of their group makes the NIC use uneven, hence one host per GPU.
bool can_aggregate_tp(const costmodel::ClusterSpec& c, const costmodel::Topology& topo, const costmodel::ParallelPlan& p,
                      const NicFactors& f = {});

// The aggregated platform: one host per tensor-parallel group of p (the replicas simulated, on
// a topology of num_gpus GPUs: sim/symmetry.h) at the speed of one GPU, its port, host link
// and NIC group with tp, tp and (NICs used) times the bandwidth of one, same latencies; where a
// what-if degrades one of a group's NICs, the group's lanes move in step, so its NIC group runs
// at (NICs used) times the bandwidth of its slowest NIC. `pairs`
// are GPU pairs as for build_platform. Requires can_aggregate_tp.
Platform build_unit_platform(const costmodel::ClusterSpec& c, const costmodel::Topology& topo,
                             const costmodel::ParallelPlan& p, int num_gpus, const std::vector<std::pair<int, int>>& pairs,
                             const BuildOptions& opt = {});

// Loads a SimGrid XML platform. Throws InputError when the hosts marked as GPUs are not exactly
// 0..num_gpus-1, a host-memory name is unknown, or a link has zero bandwidth.
Platform load_platform_file(const std::string& path, int num_gpus);

}  // namespace stagecraft::sim
