// The simulated platform: one SimGrid host per GPU, links as the cluster describes them, and
// a host-memory endpoint per node for offload. Built from a ClusterSpec or loaded from a
// SimGrid XML file whose GPU hosts carry the property stagecraft_gpu="<global rank>"
// (docs/sim.md). Internal to sim/: includes SimGrid.
#pragma once

#include <simgrid/s4u.hpp>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;         // (num_gpus) host of each global GPU rank
  std::vector<simgrid::s4u::Host*> host_memory;  // (num_gpus) where a GPU offloads; null = none
};

// Network model settings so simulated latency and bandwidth equal the configured ones:
// CM02 (no LV08 factors), latency and bandwidth factors 1, no TCP-gamma cap, no cross-traffic.
void configure_network();

struct BuildOptions {
  int fat_tree_leaf_nodes = 8;  // fat-tree: nodes under one leaf switch (full bisection uplinks)
};

// Builds the platform for the first num_gpus GPUs of the cluster. `pairs` lists every
// (source, destination) GPU pair that will exchange data: the routing table holds only those
// (plus each GPU's route to its host memory). Throws InputError for zero or negative speeds
// or bandwidths, naming the field.
Platform build_platform(const costmodel::ClusterSpec& c, int num_gpus, const std::vector<std::pair<int, int>>& pairs,
                        const BuildOptions& opt = {});

// Loads a SimGrid XML platform. Throws InputError when the hosts marked as GPUs are not exactly
// 0..num_gpus-1, a host-memory name is unknown, or a link has zero bandwidth.
Platform load_platform_file(const std::string& path, int num_gpus);

}  // namespace stagecraft::sim
