#include "costmodel/comm.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace stagecraft::costmodel {

double p2p_s(double bytes, const Link& link) {
  if (bytes <= 0 || link.kind == "self") return 0;
  return link.latency_s + bytes / link.bandwidth_Bps;
}

double ring_allreduce_s(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  double steps = 2.0 * (n - 1);
  return steps / n * bytes / link.bandwidth_Bps + steps * link.latency_s;
}

double reduce_scatter_s(double bytes, int n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  double steps = n - 1.0;
  return steps / n * bytes / link.bandwidth_Bps + steps * link.latency_s;
}

double all_gather_s(double bytes, int n, const Link& link) { return reduce_scatter_s(bytes, n, link); }

namespace {

// One form of the all-reduce: time(S) = latency_s + S * per_byte_s.
struct Affine {
  double latency_s = 0;
  double per_byte_s = 0;
  double at(double bytes) const { return latency_s + bytes * per_byte_s; }
  double inverse(double time_s) const { return (time_s - latency_s) / per_byte_s; }
};

Affine flat_form(const AllReducePath& p) {
  const double steps = 2.0 * (p.ranks - 1);
  return {steps * p.flat.latency_s, steps / p.ranks / p.flat.bandwidth_Bps};
}

Affine channels_form(const AllReducePath& p) {
  const double L = p.local, N = p.nodes, n = L * N;
  return {2 * ((n - N) * p.intra.latency_s + (N - 1) * p.inter.latency_s),
          2 * (n - 1) / n * std::max((L - 1) / (L * p.intra.bandwidth_Bps), 1 / (L * p.inter.bandwidth_Bps))};
}

Affine tree_form(const AllReducePath& p) {
  const double L = p.local;
  double per_byte = 2 / (L * p.inter.bandwidth_Bps);                           // a node's NICs
  if (p.local >= 2) per_byte = std::max(per_byte, 2 * (L - 1) / (L * p.intra.bandwidth_Bps));  // a member's port
  return {2 * ((L - 1) * p.intra.latency_s + tree_depth(p.nodes) * p.inter.latency_s), per_byte};
}

// The forms a path offers, flat first (ties go to the earlier form).
std::vector<std::pair<AllReduceAlgo, Affine>> forms(const AllReducePath& p, bool tree_allowed) {
  std::vector<std::pair<AllReduceAlgo, Affine>> out{{AllReduceAlgo::Flat, flat_form(p)}};
  if (p.channels()) out.emplace_back(AllReduceAlgo::Channels, channels_form(p));
  if (tree_allowed && p.tree()) out.emplace_back(AllReduceAlgo::Tree, tree_form(p));
  return out;
}

Affine chosen(double bytes, const AllReducePath& p, bool tree_allowed) {
  const auto f = forms(p, tree_allowed);
  Affine best = f.front().second;
  for (const auto& [algo, form] : f)
    if (form.at(bytes) < best.at(bytes)) best = form;
  return best;
}

}  // namespace

const char* allreduce_algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::Flat: return "ring";
    case AllReduceAlgo::Channels: return "ring, a channel per NIC";
    case AllReduceAlgo::Tree: return "tree";
  }
  return "?";
}

int tree_depth(int nodes) {
  int d = 0;
  while ((2 << d) <= nodes) ++d;
  return nodes >= 2 ? d : 0;
}

int double_tree_parent(int i, int n, int which) {
  const int j = which == 0 ? i : n - 1 - i;  // position in this tree's heap order
  if (j == 0) return -1;
  const int pj = (j - 1) / 2;
  return which == 0 ? pj : n - 1 - pj;
}

AllReduceAlgo allreduce_algorithm(double bytes, const AllReducePath& path, bool tree_allowed) {
  const auto f = forms(path, tree_allowed);
  auto best = f.front();
  for (const auto& cand : f)
    if (cand.second.at(bytes) < best.second.at(bytes)) best = cand;
  return best.first;
}

double allreduce_s(double bytes, const AllReducePath& path) {
  if (path.ranks <= 1 || bytes <= 0) return 0;
  return chosen(bytes, path, true).at(bytes);
}

double reduce_scatter_s(double bytes, const AllReducePath& path) {
  if (path.ranks <= 1 || bytes <= 0) return 0;
  return chosen(bytes, path, false).at(bytes) / 2;
}

double all_gather_s(double bytes, const AllReducePath& path) { return reduce_scatter_s(bytes, path); }

double allreduce_latency_s(double bytes, const AllReducePath& path, bool tree_allowed) {
  if (path.ranks <= 1) return 0;
  return chosen(bytes, path, tree_allowed).latency_s;
}

double allreduce_latency_s(const AllReducePath& path, bool tree_allowed) {
  if (path.ranks <= 1) return 0;
  double best = flat_form(path).latency_s;
  for (const auto& [algo, form] : forms(path, tree_allowed)) best = std::min(best, form.latency_s);
  return best;
}

// allreduce_s is the lowest of increasing affine forms, so its inverse is the largest of
// their inverses.
double allreduce_bytes(double time_s, const AllReducePath& path, bool tree_allowed) {
  if (path.ranks <= 1 || time_s <= 0) return 0;
  double best = flat_form(path).inverse(time_s);
  for (const auto& [algo, form] : forms(path, tree_allowed)) best = std::max(best, form.inverse(time_s));
  return best;
}

double allreduce_bus_bandwidth_Bps(double bytes, int n, double time_s) {
  if (n <= 1 || time_s <= 0) return 0;
  return bytes / time_s * 2.0 * (n - 1) / n;
}

}  // namespace stagecraft::costmodel
