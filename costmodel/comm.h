// Communication costs under the alpha-beta model: a message of S bytes over a link of
// bandwidth B and latency alpha takes alpha + S/B. Ring collectives as NCCL runs them
// (nccl-tests PERFORMANCE.md): all-reduce 2(n-1)/n * S/B + 2(n-1)*alpha,
// reduce-scatter and all-gather (n-1)/n * S/B + (n-1)*alpha. S is the whole buffer.
#pragma once

#include <string>

namespace stagecraft::costmodel {

struct Link {
  double bandwidth_Bps = 0;  // per direction, as one flow sees it after sharing
  double latency_s = 0;
  std::string kind;          // "self", "fast-group", "intra-node" or "inter-node", for reports
};

double p2p_s(double bytes, const Link& link);
double ring_allreduce_s(double bytes, int ranks, const Link& link);
double reduce_scatter_s(double bytes, int ranks, const Link& link);
double all_gather_s(double bytes, int ranks, const Link& link);
// An all-reduce as NCCL runs it over a group spread across nodes, in the fastest of three forms
// for its size (NCCL's tuner picks its algorithm by the same kind of cost model: time =
// latency + S / bandwidth per algorithm, NVIDIA/nccl src/graph/tuning.cc).
// - Flat: one ring over all n ranks, timed on its slowest hop (groups not spread evenly).
// - Channels (every node holds L >= 2 members, N >= 2 nodes): NCCL's ring with L channels, each
//   a ring over all n ranks node by node whose in-node order is rotated so that channel c
//   leaves every node through a different member, hence through that member's NIC. Each
//   channel carries S/L and all run at once: 2(n-1) steps, 2(N-1) of them across nodes
//   (latency 2((n-N) a_i + (N-1) a_e), tuning.cc's count), a member's port carrying
//   2(n-1)/n * S (L-1)/L and each NIC 2(n-1)/n * S/L per direction: per byte
//   2(n-1)/n * max((L-1)/(L b_i), 1/(L b_e)). Where the node's one NIC carries every channel's
//   crossing (b_e shared L ways), this is no faster than the flat ring.
// - Tree (every node holds L >= 1 members, N >= 2 nodes): NCCL's double binary tree across the
//   nodes (Sanders et al. 2009; NCCL 2.4), a chain inside each node, L channels each entering
//   the node through a different member; each tree carries half the buffer, reduced up and
//   broadcast down, pipelined: latency 2((L-1) a_i + floor(log2 N) a_e) as the tuner counts it;
//   a node's NICs carry 2S per direction (2S/L each), a member's in-node port 2S(L-1)/L, so
//   per byte max(2/(L b_e), 2(L-1)/(L b_i)). It wins on latency (log N steps instead of n) for
//   small buffers over many nodes; the rings win on bandwidth.
// NCCL runs reduce-scatter and all-gather as rings only. The simulator runs the same choice as
// flows (sim/executor.cpp).
enum class AllReduceAlgo { Flat, Channels, Tree };
const char* allreduce_algo_name(AllReduceAlgo a);
struct AllReducePath {
  int ranks = 1;       // n, members of the group
  int local = 1;       // L, members per node (channels and tree forms only)
  int nodes = 1;       // N, nodes the group spans (channels and tree forms only)
  Link flat;           // slowest hop of the flat ring
  Link intra;          // slowest in-node hop of the channels' rings and the tree's chain
  Link inter;          // cross-node hop of the channels and tree forms, its NIC shared
  bool channels() const { return local >= 2 && nodes >= 2; }
  bool tree() const { return local >= 1 && nodes >= 2; }
};
// Inter-node depth of NCCL's trees over n nodes: floor(log2 n) (tuning.cc's log2i).
int tree_depth(int nodes);
// Parent of node i in tree `which` (0 or 1) of a double binary tree over n nodes; -1 for the
// root. Tree 0 is the heap order over 0..n-1, tree 1 the same over n-1..0: the inner nodes of
// one are leaves of the other, as in NCCL's double binary tree.
int double_tree_parent(int i, int n, int which);
// The form allreduce_s takes for a buffer of `bytes`; with tree_allowed false only the rings
// (what NCCL runs for reduce-scatter and all-gather).
AllReduceAlgo allreduce_algorithm(double bytes, const AllReducePath& path, bool tree_allowed = true);
double allreduce_s(double bytes, const AllReducePath& path);
// Reduce-scatter and all-gather of a buffer of `bytes` (each member ends with or starts from
// bytes / n) on `path`: each is one half of the faster ring form of the all-reduce, whose
// 2(n-1) steps are a reduce-scatter followed by an all-gather (n-1 steps each). The
// distributed optimizer's gradient and parameter collectives.
double reduce_scatter_s(double bytes, const AllReducePath& path);
double all_gather_s(double bytes, const AllReducePath& path);
// The latency terms of the form allreduce_algorithm picks for `bytes`.
double allreduce_latency_s(double bytes, const AllReducePath& path, bool tree_allowed = true);
// What an all-reduce of a few bytes costs on `path` (the smallest latency of the forms).
double allreduce_latency_s(const AllReducePath& path, bool tree_allowed = true);
// The buffer size S whose all-reduce on `path` takes time_s (the inverse of allreduce_s, or of
// the rings alone); negative when time_s is below the path's latency alone.
double allreduce_bytes(double time_s, const AllReducePath& path, bool tree_allowed = true);
// Bus bandwidth of an all-reduce that took time_s: algorithm bandwidth * 2(n-1)/n (nccl-tests).
double allreduce_bus_bandwidth_Bps(double bytes, int ranks, double time_s);

}  // namespace stagecraft::costmodel
