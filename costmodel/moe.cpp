#include "costmodel/moe.h"

#include <algorithm>
#include <cmath>

namespace stagecraft::costmodel {

int expert_data_parallel(const ParallelPlan& p) { return expert_ranks(p) / p.ep; }

Axis expert_axis(const ParallelPlan& p) { return expert_tp(p) == 1 && p.tp > 1 ? kTpDpCp : kDpCp; }

AllToAllBytes all_to_all_bytes(double tokens, double token_bytes, int k, int L, int N, int node_limit) {
  AllToAllBytes b;
  const double n = static_cast<double>(L) * N;
  b.total_bytes = tokens * k * token_bytes;
  if (n <= 1) return b;
  if (node_limit > 0 && N > 1) {
    const double reached = N * (1 - std::pow(1 - 1.0 / N, k));  // distinct nodes a token's k copies reach
    const double remote = std::min(static_cast<double>(node_limit), reached) * (N - 1.0) / N;
    b.cross_node_bytes = tokens * token_bytes * remote;
    b.intra_node_bytes = b.total_bytes * (L - 1.0) / L;
    return b;
  }
  b.intra_node_bytes = b.total_bytes * (L - 1.0) / n;
  b.cross_node_bytes = b.total_bytes * (n - L) / n;
  return b;
}

double all_to_all_s(const AllToAllBytes& b, const AllReducePath& path) {
  if (path.ranks <= 1 || b.total_bytes <= 0) return 0;
  if (path.nodes >= 2) {
    const double intra = path.local > 1 ? path.intra.latency_s + b.intra_node_bytes / path.intra.bandwidth_Bps : 0;
    const double cross = path.inter.latency_s + b.cross_node_bytes / path.inter.bandwidth_Bps;
    return std::max(intra, cross);
  }
  return path.flat.latency_s + (b.intra_node_bytes + b.cross_node_bytes) / path.flat.bandwidth_Bps;
}

MoeLayer moe_layer(const ModelSpec& m, int bb, int t, int ep, int et, const AllReducePath& ep_path, const Link& tp_link) {
  MoeLayer l;
  if (!is_moe(m)) return l;
  const double load = moe_load_factor(m), e = m.bytes_per_activation;
  // With tp > 1 (sequence parallelism) each tp rank routes s/t of the tokens.
  const double tokens = static_cast<double>(bb) * m.seq_length / t * load;
  if (ep > 1) {
    const int L = ep_path.nodes >= 2 ? ep_path.local : ep, N = ep_path.nodes >= 2 ? ep_path.nodes : 1;
    l.bytes = all_to_all_bytes(tokens, m.hidden_size * e, m.experts_per_token, L, N, m.moe_node_limit);
    l.all_to_alls_f = 2;
    l.all_to_alls_b = 2;
    l.all_to_all_s = all_to_all_s(l.bytes, ep_path);
  }
  if (et > 1) {
    l.tp_gather_bytes = static_cast<double>(bb) * m.seq_length * load * m.experts_per_token * m.hidden_size * e;
    l.tp_s = all_gather_s(l.tp_gather_bytes, et, tp_link) + reduce_scatter_s(l.tp_gather_bytes, et, tp_link);
  }
  l.exposed_f_s = l.all_to_alls_f * l.all_to_all_s + l.tp_s;
  l.exposed_b_s = l.all_to_alls_b * l.all_to_all_s + l.tp_s;
  return l;
}

nlohmann::json to_json(const MoeStage& s) {
  const MoeLayer& l = s.layer;
  return {{"moe_layers", s.moe_layers},
          {"all_to_alls_forward", l.all_to_alls_f},
          {"all_to_alls_backward", l.all_to_alls_b},
          {"all_to_all_bytes", l.bytes.total_bytes},
          {"all_to_all_intra_node_bytes", l.bytes.intra_node_bytes},
          {"all_to_all_cross_node_bytes", l.bytes.cross_node_bytes},
          {"all_to_all_s", l.all_to_all_s},
          {"tp_gather_bytes", l.tp_gather_bytes},
          {"tp_s", l.tp_s},
          {"exposed_forward_s", s.exposed_f_s},
          {"exposed_backward_s", s.exposed_b_s},
          {"expert_params", s.expert_params}};
}

}  // namespace stagecraft::costmodel
