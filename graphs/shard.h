// Merak's graph sharding (Lai et al., Merak, TPDS 2023, Sec. 4.2, Algorithms 1 and 2): the
// graph cut into a sequence of subgraphs between which only one tensor passes (plus the
// "common nodes" every block reads, such as the attention mask), so that any contiguous run of
// the sequence can be a pipeline stage.
//
// Algorithm 1 (dependency search) finds, for each node in topological order, its farthest
// dependency: the first user of a graph input it reads, an output of an earlier subgraph (which
// may be read by the next subgraph only), or an earlier node other than the one visited just
// before. Algorithm 2 gives each node a subgraph id: when the farthest dependency lies in an
// earlier subgraph, everything from it on joins that subgraph; a subgraph closes once its
// parameters exceed the total over k (the upper bound on the number of partitions), its last
// node and the common nodes still to be read becoming its outputs.
#pragma once

#include <vector>

#include "graphs/graph.h"

namespace stagecraft::graphs {

struct ShardOptions {
  int max_subgraphs = 0;      // k, the upper bound on the number of partitions (Merak: from the
                              // layers or the devices); 0 = the number of nodes (the finest cut)
  int common_min_users = 3;   // a node read by at least this many nodes is a common node (Merak:
                              // "a user count more than the number of transformer layers"); a
                              // graph input read twice or more is one too
};

struct Subgraph {
  std::vector<int> nodes;    // in graph order
  std::vector<int> inputs;   // nodes outside it that it reads: the previous subgraph's outputs,
                             // graph inputs and common nodes
  std::vector<int> outputs;  // nodes read after it (the one boundary tensor, common nodes passed on)
  double fwd_flops = 0;      // its nodes' forward FLOPs, one microbatch
  double bwd_flops = 0;      // and backward
  double param_bytes = 0;    // parameters its nodes own or share (a tied copy counts here too)
  double act_bytes = 0;      // what its nodes keep for the backward (graph.h kept_bytes)
  double fwd_s = 0, bwd_s = 0;  // measured seconds of its nodes that carry them (graph.h fwd_s, bwd_s)
  double measured_fwd_flops = 0, measured_bwd_flops = 0;  // those nodes' FLOPs, priced by the times instead
  int unmeasured = 0;        // operators without measured times
  double boundary_bytes = 0; // bytes it hands to the next subgraph (outputs that are not graph
                             // inputs or common nodes passed along)
};

struct Sharding {
  std::vector<Subgraph> subgraphs;  // the sequence
  std::vector<int> subgraph_of;     // (nodes) subgraph id; -1 for graph inputs
  std::vector<int> common;          // common nodes
};

// Algorithms 1 and 2. Throws InputError for an empty graph or a bad option.
Sharding shard(const Graph& g, const ShardOptions& opt = {});

}  // namespace stagecraft::graphs
