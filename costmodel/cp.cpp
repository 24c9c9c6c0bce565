#include "costmodel/cp.h"

#include <algorithm>

namespace stagecraft::costmodel {

CpRingWork cp_ring_work(const ModelSpec& m, int bb, int t, int cp) {
  CpRingWork w;
  if (cp < 2) return w;
  w.exchanges_f = 2 * (cp - 1);
  w.exchanges_b = 4 * (cp - 1);
  w.chunk_bytes = bb * cp_rank_tokens(m, cp) * kv_hidden_size(m) / t * m.bytes_per_activation;
  return w;
}

CpLayer cp_layer(const CpRingWork& w, int cp, double core_f_s, double core_i_s, const Link& ring) {
  CpLayer c;
  if (cp < 2) return c;
  const double steps = cp - 1;
  c.exchanges_f = w.exchanges_f;
  c.exchanges_b = w.exchanges_b;
  c.chunk_bytes = w.chunk_bytes;
  c.step_f_s = p2p_s(2 * c.chunk_bytes, ring);
  c.step_b_s = p2p_s(4 * c.chunk_bytes, ring);
  c.exposed_f_s = steps * std::max(0.0, c.step_f_s - core_f_s / cp);
  c.exposed_b_s = steps * std::max(0.0, c.step_b_s - core_i_s / cp);
  return c;
}

nlohmann::json to_json(const CpLayer& c) {
  return {{"exchanges_forward", c.exchanges_f},      {"exchanges_backward", c.exchanges_b},
          {"chunk_bytes", c.chunk_bytes},            {"step_forward_s", c.step_f_s},
          {"step_backward_s", c.step_b_s},           {"exposed_forward_s", c.exposed_f_s},
          {"exposed_backward_s", c.exposed_b_s}};
}

double cp_rank_tokens(const ModelSpec& m, int cp) { return static_cast<double>(m.seq_length) / cp; }

ModelSpec cp_rank_model(const ModelSpec& m, int cp) {
  ModelSpec r = m;
  r.seq_length = static_cast<int>(cp_rank_tokens(m, cp));
  return r;
}

}  // namespace stagecraft::costmodel
