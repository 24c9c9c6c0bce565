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

AllToAllBytes deduplicated_all_to_all_bytes(double tokens, double token_bytes, int k, int L, int N, int node_limit) {
  AllToAllBytes b;
  const double n = static_cast<double>(L) * N;
  const double q = 1 - std::pow(1 - 1 / n, k);  // a given rank holds one of a token's k experts
  b.total_bytes = tokens * token_bytes * n * q;
  if (n <= 1) return b;
  b.intra_node_bytes = tokens * token_bytes * (L - 1.0) * q;
  if (N > 1) {
    const double reached = N * (1 - std::pow(1 - 1.0 / N, k));  // distinct nodes a token's k copies reach
    const double limit = node_limit > 0 ? std::min(static_cast<double>(node_limit), reached) : reached;
    b.cross_node_bytes = tokens * token_bytes * limit * (N - 1.0) / N;
  }
  return b;
}

namespace {
constexpr double kProbBytes = 4;   // fp32 routing probabilities (Megatron-Bridge's MoE recipes keep the
                                   // router in fp32: --moe-router-dtype fp32)
constexpr double kCountBytes = 8;  // int64 per-expert token counts (token_dispatcher.py preprocess)

// The per-token exchanges of the all-to-all and flex dispatchers on the ep group's nodes.
void set_exchange_bytes(MoeDispatchWork& w, const ModelSpec& m, double tokens, int ep, const AllReducePath& ep_path) {
  const int L = ep_path.nodes >= 2 ? ep_path.local : ep, N = ep_path.nodes >= 2 ? ep_path.nodes : 1;
  const double h_bytes = m.hidden_size * m.bytes_per_activation;
  const int k = m.experts_per_token;
  w.all_to_alls_f = 2;
  w.all_to_alls_b = 2;
  if (w.dispatcher == "flex") {  // each token once per rank, its k fp32 probabilities along
    w.bytes = deduplicated_all_to_all_bytes(tokens, h_bytes + k * kProbBytes, k, L, N, m.moe_node_limit);
    w.collectives_f = w.collectives_b = 2;
    return;
  }
  w.bytes = all_to_all_bytes(tokens, h_bytes, k, L, N, m.moe_node_limit);
  w.probs_bytes = all_to_all_bytes(tokens, kProbBytes, k, L, N, m.moe_node_limit);
  w.counts_bytes = kCountBytes * m.num_experts * ep;
  w.collectives_f = 4;  // counts all-gather, tokens, probabilities, combine
  w.collectives_b = 3;  // combine's gradient, tokens' and probabilities' gradients
}
}  // namespace

MoeDispatchWork moe_dispatch_work(const ModelSpec& m, int bb, int t, int ep, int et, const AllReducePath& ep_path,
                                  const std::string& dispatcher) {
  MoeDispatchWork w;
  w.dispatcher = dispatcher;
  if (!is_moe(m)) return w;
  const double load = moe_load_factor(m), e = m.bytes_per_activation;
  // With tp > 1 (sequence parallelism) each tp rank routes s/t of the tokens.
  const double tokens = static_cast<double>(bb) * m.seq_length / t * load;
  if (ep > 1 && dispatcher == "allgather") {
    // Every rank gathers the ep group's tokens with their routing map (1 byte) and fp32
    // probabilities, and reduce-scatters the combined outputs in the probabilities' type.
    const double rows = tokens * ep, E = m.num_experts;
    w.gather_bytes = rows * (m.hidden_size * e + E * (kProbBytes + 1));
    w.scatter_bytes = rows * m.hidden_size * kProbBytes;
    w.collectives_f = 2;
    w.collectives_b = 2;
  } else if (ep > 1) {
    set_exchange_bytes(w, m, tokens, ep, ep_path);
  }
  if (et > 1) {
    w.tp_degree = et;
    w.tp_gather_bytes = static_cast<double>(bb) * m.seq_length * load * m.experts_per_token * m.hidden_size * e;
  }
  return w;
}

MoeLayer price_moe_layer(const MoeDispatchWork& w, const AllReducePath& ep_path, const Link& tp_link) {
  MoeLayer l;
  l.all_to_alls_f = w.all_to_alls_f;
  l.all_to_alls_b = w.all_to_alls_b;
  l.bytes = w.bytes;
  if (w.all_to_alls_f > 0) l.all_to_all_s = all_to_all_s(w.bytes, ep_path);
  const int n = ep_path.ranks;
  if (w.probs_bytes.total_bytes > 0) l.probs_s = all_to_all_s(w.probs_bytes, ep_path);
  if (w.counts_bytes > 0) l.counts_s = all_gather_s(w.counts_bytes, n, ep_path.flat);
  if (w.gather_bytes > 0)
    l.gather_s = all_gather_s(w.gather_bytes, n, ep_path.flat) + reduce_scatter_s(w.scatter_bytes, n, ep_path.flat);
  l.tp_gather_bytes = w.tp_gather_bytes;
  if (w.tp_degree > 1)
    l.tp_s = all_gather_s(w.tp_gather_bytes, w.tp_degree, tp_link) + reduce_scatter_s(w.tp_gather_bytes, w.tp_degree, tp_link);
  l.exposed_f_s = l.all_to_alls_f * l.all_to_all_s + l.probs_s + l.counts_s + l.gather_s + l.tp_s;
  l.exposed_b_s = l.all_to_alls_b * l.all_to_all_s + l.probs_s + l.gather_s + l.tp_s;
  return l;
}

MoeLayer moe_layer(const ModelSpec& m, int bb, int t, int ep, int et, const AllReducePath& ep_path, const Link& tp_link,
                   const std::string& dispatcher) {
  return price_moe_layer(moe_dispatch_work(m, bb, t, ep, et, ep_path, dispatcher), ep_path, tp_link);
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
          {"probs_all_to_all_s", l.probs_s},
          {"counts_all_gather_s", l.counts_s},
          {"allgather_dispatch_s", l.gather_s},
          {"tp_gather_bytes", l.tp_gather_bytes},
          {"tp_s", l.tp_s},
          {"exposed_forward_s", s.exposed_f_s},
          {"exposed_backward_s", s.exposed_b_s},
          {"expert_params", s.expert_params}};
}

}  // namespace stagecraft::costmodel
