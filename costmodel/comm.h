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
// Bus bandwidth of an all-reduce that took time_s: algorithm bandwidth * 2(n-1)/n (nccl-tests).
double allreduce_bus_bandwidth_Bps(double bytes, int ranks, double time_s);

}  // namespace stagecraft::costmodel
