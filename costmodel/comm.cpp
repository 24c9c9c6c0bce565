#include "costmodel/comm.h"

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

double allreduce_bus_bandwidth_Bps(double bytes, int n, double time_s) {
  if (n <= 1 || time_s <= 0) return 0;
  return bytes / time_s * 2.0 * (n - 1) / n;
}

}  // namespace stagecraft::costmodel
