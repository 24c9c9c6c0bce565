// The estimate path for a model given as a graph (graph.h): Merak's subgraph sequence
// (shard.h) cut into the stages of the plan's schedule (partition.h), each stage priced from
// its subgraphs as one tp rank runs them (tp.h), and the schedule evaluated on that cost table,
// so that estimate, compare, simulate and plan take `--model FILE.graph.json` (docs/graphs.md).
//
// A stage's forward and backward are its nodes' measured times where the graph carries them
// (fwd_s, bwd_s: `partition --measure`), else their FLOPs at the cluster's flat rate (the
// analytic cost table's peak x achieved_efficiency), plus the blocking tp all-reduces of its
// nodes' rules; a split backward's W the weight gradients of the nodes with parameters
// (costmodel::weight_gradient_share: half a product's, none of an attention core's), a recomputation its
// forward again; it sends the tensor at its cut (p2p), reduces its parameters' gradients over
// dp as the analytic table does, keeps what its nodes keep for the backward (saved_bytes; the
// cut's input alone when recomputed), and holds 16 bytes per parameter (costmodel/memory.h).
// Not priced: sequence parallelism, tp overlap other than blocking, layer_tp, profiles of the
// built-in layers (--profile), and the schedule parameters the cost model resolves by search
// (merak's alpha1 and fold3d's segments must be given).
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
// this plan: plan.stage_layers (counted in subgraphs) when given, else balanced by each
// subgraph's seconds as the estimate prices them on one tp rank of the plan (partition.h).
Partition stage_partition(const Graph& g, const Sharding& sh, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p,
                          int stages);

// The prediction; throws InputError for what the graph route does not price (above).
costmodel::Estimate estimate_graph(const Graph& g, const costmodel::ClusterSpec& c, const costmodel::ParallelPlan& p,
                                   const costmodel::EstimateOptions& opt = {}, const ShardOptions& so = {});

}  // namespace stagecraft::graphs
