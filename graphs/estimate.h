// The estimate path for a model given as a graph (graph.h): Merak's subgraph sequence
// (shard.h) cut into the stages of the plan's schedule (partition.h), each stage priced from
// its subgraphs, and the schedule evaluated on that cost table, so that estimate, compare and
// simulate take `--model FILE.graph.json` (docs/graphs.md).
//
// A stage's forward and backward are its subgraphs' FLOPs at the cluster's flat rate (the
// analytic cost table's peak x achieved_efficiency), a split backward half input and half
// weight gradient, a recomputation its forward again; it sends the tensor at its cut (p2p),
// reduces its parameters' gradients over dp as the analytic table does, keeps its nodes'
// outputs for the backward (the cut's input alone when recomputed), and holds 16 bytes per
// parameter (costmodel/memory.h). Not yet: tensor parallelism (the graph's tp rules are not
// priced), sequence parallelism, measured profiles, and the schedule parameters the cost model
// resolves by search (merak's alpha1 and fold3d's segments must be given).
#pragma once

#include "costmodel/estimate.h"
#include "graphs/graph.h"
#include "graphs/partition.h"
#include "graphs/shard.h"

namespace stagecraft::graphs {

// The model a graph stands for in an Estimate: its name, the sequence length of its token
// input (the second dimension of the first two-dimensional input; else 1), 16-bit weights.
costmodel::ModelSpec model_of(const Graph& g);

// The `stages` stages (per pipeline chain) estimate_graph cuts the subgraph sequence into for
// this plan: plan.stage_layers (counted in subgraphs) when given, else balanced at the
// cluster's rate (partition.h).
Partition stage_partition(const Sharding& sh, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p, int stages);

// The prediction; throws InputError for what the graph route does not price (above).
costmodel::Estimate estimate_graph(const Graph& g, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p,
                                   const costmodel::EstimateOptions& opt = {}, const ShardOptions& so = {});

}  // namespace stagecraft::graphs
