#include "costmodel/comm.h"

#include <algorithm>

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

Affine two_level_form(const AllReducePath& p) {
  const double L = p.local, N = p.nodes;
  return {2 * (L - 1) * p.intra.latency_s + 2 * (N - 1) * p.inter.latency_s,
          2 * (L - 1) / (L * p.intra.bandwidth_Bps) + 2 * (N - 1) / (L * N * p.inter.bandwidth_Bps)};
}

}  // namespace

bool allreduce_two_level(double bytes, const AllReducePath& path) {
  return path.two_level() && two_level_form(path).at(bytes) < flat_form(path).at(bytes);
}

double allreduce_s(double bytes, const AllReducePath& path) {
  if (path.ranks <= 1 || bytes <= 0) return 0;
  return allreduce_two_level(bytes, path) ? two_level_form(path).at(bytes) : ring_allreduce_s(bytes, path.ranks, path.flat);
}

double reduce_scatter_s(double bytes, const AllReducePath& path) { return allreduce_s(bytes, path) / 2; }

double all_gather_s(double bytes, const AllReducePath& path) { return allreduce_s(bytes, path) / 2; }

double allreduce_latency_s(double bytes, const AllReducePath& path) {
  if (path.ranks <= 1) return 0;
  return allreduce_two_level(bytes, path) ? two_level_form(path).latency_s : flat_form(path).latency_s;
}

double allreduce_latency_s(const AllReducePath& path) {
  if (path.ranks <= 1) return 0;
  const double flat = flat_form(path).latency_s;
  return path.two_level() ? std::min(flat, two_level_form(path).latency_s) : flat;
}

// allreduce_s is the lower of two increasing affine forms, so its inverse is the larger of
// their inverses.
double allreduce_bytes(double time_s, const AllReducePath& path) {
  if (path.ranks <= 1 || time_s <= 0) return 0;
  const double flat = flat_form(path).inverse(time_s);
  return path.two_level() ? std::max(flat, two_level_form(path).inverse(time_s)) : flat;
}

double allreduce_bus_bandwidth_Bps(double bytes, int n, double time_s) {
  if (n <= 1 || time_s <= 0) return 0;
  return bytes / time_s * 2.0 * (n - 1) / n;
}

}  // namespace stagecraft::costmodel
