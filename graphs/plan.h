// The planner on a model given as a graph (docs/graphs.md): `stagecraft plan --model
// FILE.graph.json`. The space is narrowed to what the graph route prices (graphs/estimate.h):
// tp degrees that divide every column split (graphs/tp.h) with blocking all-reduces, no
// sequence parallelism, no selective recomputation, and the graph's own microbatch size (its
// shapes are one microbatch's); each point is priced by estimate_graph, whose stages are
// balanced from Merak's subgraph sequence.
#pragma once

#include "graphs/graph.h"
#include "graphs/shard.h"
#include "planner/search.h"

namespace stagecraft::graphs {

// b of the graph: the first dimension of its first input (1 when it has none).
int microbatch_size_of(const Graph& g);

// The model the planner enumerates against: model_of(g) with one layer per subgraph, and heads
// and MLP width the greatest common divisor of the column splits' widths (so that the tp
// degrees the planner tries divide them all).
costmodel::ModelSpec plan_model_of(const Graph& g, const ShardOptions& so = {});

// planner::search with the space narrowed as above and estimate_graph pricing every point.
planner::SearchResult search_graph(const Graph& g, const costmodel::ClusterSpec& c, planner::PlanSpace space,
                                   planner::SearchOptions opt = {}, const ShardOptions& so = {});

}  // namespace stagecraft::graphs
