// Communication costs under the alpha-beta model: a message of S bytes over a link of
// bandwidth B and latency alpha takes alpha + S/B. Ring collectives as NCCL runs them
// (nccl-tests PERFORMANCE.md; facts.md): all-reduce 2(n-1)/n * S/B + 2(n-1)*alpha,
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
// An all-reduce as NCCL runs it over a group spread across nodes, in the faster of two forms
// for its size (NCCL's tuner picks its algorithm by the same kind of cost model). Flat: one
// ring over all n ranks, timed on its slowest hop. Two-level (every node holds L >= 2 members,
// N >= 2 nodes): reduce-scatter inside each node (L-1 steps of S/L), L concurrent rings across
// the nodes among the members of the same local index, each through its own GPU's NIC
// (2(N-1) steps of S/(L N)), all-gather inside each node (L-1 steps of S/L). The two-level form
// wins where a node has NICs to spare (DGX-like nodes); the flat ring where the node's one NIC
// would carry all L cross-node rings. The simulator runs the same choice as flows
// (sim/executor.cpp).
struct AllReducePath {
  int ranks = 1;       // n, members of the group
  int local = 1;       // L, members per node (two-level form only)
  int nodes = 1;       // N, nodes the group spans (two-level form only)
  Link flat;           // slowest hop of the flat ring
  Link intra;          // slowest in-node hop of the two-level form
  Link inter;          // cross-node hop of the two-level form, its NIC shared
  bool two_level() const { return local >= 2 && nodes >= 2; }
};
double allreduce_s(double bytes, const AllReducePath& path);
// Reduce-scatter and all-gather of a buffer of `bytes` (each member ends with or starts from
// bytes / n) on `path`: each is one half of the chosen all-reduce form, whose phases are a
// reduce-scatter followed by an all-gather (ring: n-1 steps each; two-level: in-node and
// cross-node halves). The distributed optimizer's gradient and parameter collectives.
double reduce_scatter_s(double bytes, const AllReducePath& path);
double all_gather_s(double bytes, const AllReducePath& path);
// The latency terms of the form allreduce_s takes for `bytes`.
double allreduce_latency_s(double bytes, const AllReducePath& path);
// Whether allreduce_s takes the two-level form for a buffer of `bytes`.
bool allreduce_two_level(double bytes, const AllReducePath& path);
// What an all-reduce of a few bytes costs on `path` (the smaller latency of the two forms).
double allreduce_latency_s(const AllReducePath& path);
// The buffer size S whose all-reduce on `path` takes time_s (the inverse of allreduce_s);
// negative when time_s is below the path's latency alone.
double allreduce_bytes(double time_s, const AllReducePath& path);
// Bus bandwidth of an all-reduce that took time_s: algorithm bandwidth * 2(n-1)/n (nccl-tests).
double allreduce_bus_bandwidth_Bps(double bytes, int ranks, double time_s);

}  // namespace stagecraft::costmodel
