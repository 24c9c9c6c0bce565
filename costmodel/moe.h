// Expert parallelism (ParallelPlan::ep) as Megatron-Core runs it (MoEAlltoAllTokenDispatcher):
// each MoE layer's E experts are split over ep ranks of the dp x cp group (ep fastest, so an ep
// group is ep consecutive data-parallel ranks; Topology's kDpCp sub-group (ep, 1)). Each rank
// routes its tokens' k copies to the experts' ranks with one all-to-all (dispatch) and brings the
// expert outputs back with another (combine); the backward runs the two again, reversed. With
// tensor parallelism the copies a rank receives are all-gathered over its tp group before the
// experts (whose matrices are split t ways) and reduce-scattered after them. Expert gradients
// are reduced over the expert-data-parallel group, dp x cp / ep ranks ep apart.
//
// DeepSeek-V3's node-limited routing (arXiv 2412.19437, Sec. 2.1.2 and 3.2.2;
// ModelSpec::moe_node_limit M): each token's experts sit on at most M nodes and its copy crosses
// the network once per node, then reaches the experts of that node over NVLink.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/comm.h"
#include "costmodel/specs.h"
#include "costmodel/topology.h"

namespace stagecraft::costmodel {

// The expert-data-parallel degree: expert_ranks / ep (dp x cp / ep, or with etp 1 tp x dp x cp /
// ep), the copies of each expert.
int expert_data_parallel(const ParallelPlan& p);
// The axis the expert-parallel groups (ep consecutive members) and the expert-data-parallel groups
// (members ep apart) are cut along: kDpCp, or with etp 1 kTpDpCp (tp fastest, Megatron-Core's
// expert rank order tp-ep-dp-pp with the experts' tp 1).
Axis expert_axis(const ParallelPlan& p);

// What one all-to-all moves out of one rank, split by the link it takes.
struct AllToAllBytes {
  double total_bytes = 0;       // every copy the rank routes, its own experts' included
  double intra_node_bytes = 0;  // to other ranks of its node
  double cross_node_bytes = 0;  // through its NIC to other nodes
};
// A rank's `bytes` routed uniformly over an all-to-all group of n = L x N ranks (L a node, N
// nodes), each token's `k` copies of `token_bytes`: (L - 1)/n of them to the node's other ranks,
// (n - L)/n across; with a node limit M > 0 each token crosses once per distinct remote node its
// copies reach, at most M: N (1 - (1 - 1/N)^k) nodes expected for uniform routing, (N - 1)/N of
// them remote, and the copies are spread over the target node's ranks over NVLink, (L - 1)/L.
AllToAllBytes all_to_all_bytes(double tokens, double token_bytes, int k, int L, int N, int node_limit);
// DeepEP (Megatron-Core's flex dispatcher): a token travels once to each rank holding at least one
// of its k experts, not once per expert (the copies for that rank's experts are made after
// receipt; fused_a2a.py, deep_ep buffer.dispatch's is_token_in_rank). For uniform routing over
// n = L x N ranks a given rank receives a token with probability 1 - (1 - 1/n)^k; across nodes
// DeepEP sends a token once per remote node it reaches (RDMA to the same-index GPU, then NVLink;
// DeepSeek-V3 Sec. 3.2.2), as node_limit's rule.
AllToAllBytes deduplicated_all_to_all_bytes(double tokens, double token_bytes, int k, int L, int N, int node_limit);

// Seconds of one all-to-all on `path` (the ep group's; comm.h): where the group spans N >= 2
// nodes evenly, the in-node and cross-node parts at once, each on its link, the slower one
// deciding, plus each link's latency; otherwise everything the rank sends to others over the
// group's slowest hop.
double all_to_all_s(const AllToAllBytes& b, const AllReducePath& path);

// One MoE layer's expert-parallel communication on one rank, per sub-batch of bb samples.
struct MoeLayer {
  int all_to_alls_f = 0;     // dispatch and combine in one forward: 2 (0 when ep = 1)
  int all_to_alls_b = 0;     // their gradients in one backward: 2
  AllToAllBytes bytes;       // what one of them moves out of the rank: (bb s k load / t, h) copies
  double all_to_all_s = 0;   // one token all-to-all
  double probs_s = 0;        // alltoall: one probability all-to-all (one forward, one backward)
  double counts_s = 0;       // alltoall: the forward's token-count all-gather
  double gather_s = 0;       // allgather: the tokens' all-gather and the combine's reduce-scatter, per pass
  double tp_gather_bytes = 0;  // tp > 1: the copies' all-gather (and reduce-scatter) buffer, (bb s k load, h)
  double tp_s = 0;           // that all-gather plus reduce-scatter, per pass
  double exposed_f_s = 0;    // what the layer's forward waits for: its exchanges + tp_s (blocking)
  double exposed_b_s = 0;    // its backward: the same
};

// One MoE layer's expert-parallel traffic on one rank and one sub-batch, before any link prices
// it (PlanWorkload's part; moe_layer prices it).
struct MoeDispatchWork {
  std::string dispatcher = "alltoall";  // ParallelPlan::moe_dispatcher
  int all_to_alls_f = 0;       // token exchanges in one forward: dispatch and combine, 2 (0 when ep = 1)
  int all_to_alls_b = 0;       // their gradients in one backward: 2
  AllToAllBytes bytes;         // what one token exchange moves out of the rank, by link
  // alltoall: the routing probabilities travel in a second all-to-all beside each token dispatch
  // (fp32 with Megatron-Core's --moe-router-dtype fp32), forward and backward, and each forward
  // all-gathers the E per-expert token counts (int64) over the ep group first; allgather: the
  // routing map and probabilities are gathered with the tokens; flex: fp32 probabilities with
  // the tokens (token_dispatcher.py, Megatron-LM 2b343d7).
  AllToAllBytes probs_bytes;   // alltoall: one probability exchange out of the rank, by link
  double counts_bytes = 0;     // alltoall: the counts all-gather's whole buffer, E x 8 x ep
  int collectives_f = 0;       // NCCL calls of one forward (token, probability and count exchanges)
  int collectives_b = 0;       // of one backward
  double gather_bytes = 0;     // allgather: the gathered buffer per exchange, (ep T, h e + E (p + 1))
  double scatter_bytes = 0;    // allgather: the combine's reduce-scatter buffer, (ep T, h p)
  int tp_degree = 1;           // et: the experts' tp group the copies are gathered over (1: none)
  double tp_gather_bytes = 0;  // et > 1: the copies' all-gather (and reduce-scatter) buffer
};
// `et`: the experts' tp (expert_tp); `ep_path`: the ep group's (Topology::allreduce_path(
// expert_axis, ep, 1)), whose nodes split the bytes by link. With et = 1 no tp gathers: each
// rank's s/t tokens go to whole experts.
MoeDispatchWork moe_dispatch_work(const ModelSpec& m, int bb, int t, int ep, int et, const AllReducePath& ep_path,
                                  const std::string& dispatcher = "alltoall");
// The work priced on the ep group's path and the tp group's link (`tp_link`).
MoeLayer price_moe_layer(const MoeDispatchWork& w, const AllReducePath& ep_path, const Link& tp_link);
// The two together.
MoeLayer moe_layer(const ModelSpec& m, int bb, int t, int ep, int et, const AllReducePath& ep_path, const Link& tp_link,
                   const std::string& dispatcher = "alltoall");

// One stage's MoE layers, per microbatch: what the cost table adds to F, B (I) and R.
struct MoeStage {
  int moe_layers = 0;          // MoE layers of the stage
  MoeLayer layer;              // one of them, one sub-batch
  double exposed_f_s = 0;      // all of them, every sub-batch: in f_s (and r_s)
  double exposed_b_s = 0;      // in b_s and i_s
  double expert_params = 0;    // routed experts' parameters one GPU holds for the stage
};

nlohmann::json to_json(const MoeStage& s);

}  // namespace stagecraft::costmodel
