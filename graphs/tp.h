// Tensor parallelism on a graph (docs/graphs.md): what each subgraph computes, holds, hands on
// and all-reduces on one of t tensor-parallel ranks, from its nodes' tp rules (Megatron-LM,
// Shoeybi et al. 2019, Sec. 3; Narayanan et al., SC21):
//   column   the weight split by output columns: params, FLOPs and output divided by t; the
//            gradient of its (replicated) input all-reduced in the backward (Megatron's f),
//            once per input tensor however many column nodes read it
//   row      split by input rows: params and FLOPs divided by t; its output all-reduced in the
//            forward (Megatron's g), whole afterwards
//   vocab    split by vocabulary: an embedding (reading graph inputs only) all-reduces its
//            output in the forward; a head reads a replicated input and works like column
//   replicated, or absent on a node whose inputs are not all split: computed whole on every rank
// A node without a rule whose inputs (graph inputs aside) are all split works on its 1/t share
// (the attention core between QKV and the projection, the activation between the MLP matrices).
// A loss reading a split head is the vocab-parallel cross-entropy: two all-reduces of its rows
// in the forward, (rows) and (rows, 2) fp32.
#pragma once

#include <vector>

#include "costmodel/stack.h"
#include "costmodel/workload.h"
#include "graphs/graph.h"
#include "graphs/shard.h"

namespace stagecraft::graphs {

// One node's kernels on one tp rank (costmodel/workload.h), for pricing by shape: a linear node's
// three products from its input and output shapes and its split (column: n/t, row: k/t), an
// attention node's core (costmodel::attention_core_work, from its heads, kernel, causality and
// dropout), the memory-bound nodes' traffic by kind at the stack's bytes per element (layernorm,
// rmsnorm, add with or without dropout, gelu, swiglu, the loss's cross-entropy over its logits);
// a node known only by its FLOPs (no shapes, an attention node without heads, any other kind with
// FLOPs) as other_flops; any other node reads its inputs and writes its output once.
// How a node's backward splits between input and weight gradient (costmodel/workload.h): linear
// (or any other node with parameters but a norm) a product, the embedding a table, the rest none.
costmodel::ParameterUse parameter_use(const Node& n);

struct NodeWork {
  costmodel::KernelContext ctx;
  costmodel::BlockWork f, i, w;  // forward, input gradient, weight gradient
};

struct TpSubgraph {
  double fwd_flops = 0, bwd_flops = 0;      // on one tp rank, one microbatch, of the nodes without
                                            // measured times
  double fwd_s = 0, bwd_s = 0;              // measured seconds of the nodes that carry them (a split
                                            // node's divided by t)
  double bwd_w_s = 0;                       // of bwd_s, the weight gradients' share
                                            // (costmodel::weight_gradient_share by node kind)
  double param_bytes = 0;                   // on one tp rank (a tied copy counts, as in Subgraph)
  double act_bytes = 0;                     // its nodes' outputs on one tp rank
  double boundary_bytes = 0;                // what it hands on (a split output: one rank's share)
  std::vector<double> fwd_allreduce_bytes;  // all-reduces inside its forward, one entry each
  std::vector<double> bwd_allreduce_bytes;  // inside its backward
  std::vector<NodeWork> work;               // its nodes' kernels where not measured, when a stack is given
  bool end = false;                         // holds an embedding or a loss: not recomputed under full
                                            // recomputation (Megatron checkpoints the layers only)
};

// Per subgraph of `sh`; with t = 1 and no measured times the subgraphs' own figures and no
// all-reduces. Throws
// InputError for t < 1.
// With `stack`, each subgraph's `work` too.
std::vector<TpSubgraph> tp_subgraphs(const Graph& g, const Sharding& sh, int t, const costmodel::KernelStack* stack = nullptr);

}  // namespace stagecraft::graphs
