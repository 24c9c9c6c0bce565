// Flows inside a compute action among the ranks of a group: expert parallelism's all-to-alls
// (after the action's compute) and context parallelism's key/value ring (beside it). Both wait
// for every member to reach the exchange (a rendezvous), then run as flows sharing links with
// everything else; a pad per member adds what the cost table prices beyond the flows' own time
// alone, so that without other traffic the action lasts what the evaluator says.
#include <algorithm>
#include <limits>
#include <map>

#include "costmodel/costs.h"
#include "costmodel/overlapped_pair.h"
#include "sim/runner.h"

namespace stagecraft::sim::detail {

using schedules::Action;
using schedules::Op;

void Runner::group_exchange(const GroupKey& key, int size, const GroupMember& m, CommKind kind,
                            const std::function<double(int, int)>& bytes) {
  auto& members = groups_[key];
  members.push_back(m);
  if (static_cast<int>(members.size()) < size) return;
  for (const GroupMember& a : members) {
    add_edge(a.after, a.done);
    for (const GroupMember& b : members) {
      const double each = a.unit == b.unit ? 0 : bytes(a.unit, b.unit);
      if (each <= 0) continue;
      for (int j = 0; j < flows_per_group(); ++j) {
        Record r;
        r.unit = a.unit;
        r.peer_unit = b.unit;
        r.iteration = std::get<1>(key);
        r.position = std::get<3>(key);
        r.src_gpu = gpu(a.unit, j);
        r.dst_gpu = gpu(b.unit, j);
        r.comm = kind;
        Act f = flow(pf_.gpus[static_cast<size_t>(r.src_gpu)], pf_.gpus[static_cast<size_t>(r.dst_gpu)], each, r);
        add_edge(a.after, f);
        add_edge(b.after, f);
        add_edge(f, a.done);
        add_edge(f, b.done);
      }
    }
  }
  groups_.erase(key);
}

// An action's share of a per-microbatch exchange as flows (explicit tp; `f` and `b` per stage,
// empty when the plan has none): F the forward's, B and I the backward's, R the forward's for the
// share of layers it recomputes; none inside an inner schedule or an overlapped pair (DualPipe's
// F&B runs its all-to-alls beside its compute: pair_all_to_alls), nor for W.
double Runner::exchange_share(const Action& a, const std::vector<double>& f, const std::vector<double>& b) const {
  if (opt_.tp_comm != TpComm::Explicit || f.empty() || runs_inner(a)) return 0;
  const size_t st = static_cast<size_t>(a.stage);
  switch (a.op) {
    case Op::F: return f[st];
    case Op::B: case Op::I: return b[st];
    case Op::R: return costmodel::recomputed_layer_share(c_.stages[st], a.fraction) * f[st];
    default: return 0;
  }
}

// All-to-alls of an action (ep groups along dp: Workload::a2a_f).
double Runner::all_to_all_count(const Action& a) const { return exchange_share(a, w_.a2a_f, w_.a2a_b); }

// The ep group of unit u is ep consecutive dp indices. Each member sends every other member its
// share of `count` all-to-alls' bytes: the in-node part spread over the node's other members, the
// cross-node part over the other nodes' (AllToAllBytes), one flow per pair and direction, after
// both ends reach the action's all-to-alls. Its pad, after its flows both ways, adds what the
// cost table prices beyond the flows' own time alone: count x all_to_all_s minus (latency +
// count x bytes / bandwidth) of the slower of the in-node and cross-node parts.
Act Runner::all_to_alls(int u, int k, int pos, int stage, Act after, double count, int exchange) {
  const size_t st = static_cast<size_t>(stage);
  const costmodel::AllReducePath& path = w_.a2a_path;
  const double intra = count * w_.a2a_intra_bytes[st], cross = count * w_.a2a_cross_bytes[st];
  double alone = 0;
  if (path.nodes >= 2) {
    if (path.local > 1) alone = path.intra.latency_s + intra / path.intra.bandwidth_Bps;
    alone = std::max(alone, path.inter.latency_s + cross / path.inter.bandwidth_Bps);
  } else {
    alone = path.flat.latency_s + (intra + cross) / path.flat.bandwidth_Bps;
  }
  Act pad = exec(u, k, pos, std::max(0.0, count * w_.a2a_s[st] - alone), RecKind::TpPad);
  ex_.records[static_cast<size_t>(pad)].comm = CommKind::ExpertParallel;
  const int ep = w_.ep, first = u - (u % dp_) % ep;  // the group's first unit
  std::map<int, int> on_node;                           // node -> members there
  for (int v = first; v < first + ep; ++v) ++on_node[topo_.node_of(gpu(v, 0))];
  auto bytes = [&, on_node](int a, int b) {
    const int na = topo_.node_of(gpu(a, 0)), nb = topo_.node_of(gpu(b, 0));
    const int local = on_node.at(na), remote = ep - local;
    return na == nb ? intra / std::max(1, local - 1) : cross / std::max(1, remote);
  };
  group_exchange({exchange, k, rank_of_unit(u), pos, first}, ep, {u, after, pad}, CommKind::ExpertParallel, bytes);
  return pad;
}

// An OVERLAP_F_B runs its halves' all-to-alls as flows where an F or a B of its stages would
// (explicit tp, ep groups along dp, no inner schedule) and one half has any.
bool Runner::pair_runs_all_to_alls(const Action& a) const {
  if (a.op != Op::OVERLAP_F_B || opt_.tp_comm != TpComm::Explicit || w_.a2a_f.empty() || runs_inner(a)) return false;
  return w_.a2a_f[static_cast<size_t>(a.stage)] > 0 || w_.a2a_b[static_cast<size_t>(a.b_stage)] > 0;
}

// The pair's compute and expert communication from its own halves (the forward of a.stage, the
// backward or I of a.b_stage), under the cost model's rule (costmodel/overlapped_pair.h). The
// evaluator prices the pair per stage with the backward stage's forward (costs.h
// set_overlapped_pair): the same where the two stages hold alike MoE layers.
costmodel::OverlappedPair Runner::pair_costs(const Action& a) const {
  const costmodel::StageCost& f = c_.stages[static_cast<size_t>(a.stage)];
  const costmodel::StageCost& b = c_.stages[static_cast<size_t>(a.b_stage)];
  const double backward_s = a.b_op == Op::I ? b.i_s : b.b_s;
  const double fa = f.moe.exposed_f_s, ba = b.moe.exposed_b_s;
  return costmodel::overlapped_pair(f.f_s - fa + backward_s - ba, fa + ba, w_.gpu_sms);
}

// The pair's communication stream, from `start` (each member's zero-length start, after its
// inputs): the forward half's all-to-alls (dispatch and combine of every MoE layer and
// sub-batch) as flows among the ep group, then the backward half's, each a rendezvous of the
// group with its latency pad (all_to_alls); then a pad with the rest of the pair's priced
// communication (the experts' tp all-gathers and reduce-scatters, which F and B keep in their
// compute). The pair ends at a zero-length join of that stream and `compute_end` (its compute
// and tp ring): alone on their links, max(busy, comm) as the evaluator prices it; slowed by
// other flows, later.
Act Runner::pair_all_to_alls(int u, int k, int pos, const Action& a, Act start, Act compute_end, const costmodel::OverlappedPair& pc) {
  Act at = start;
  double priced = 0;
  const size_t fs = static_cast<size_t>(a.stage), bs = static_cast<size_t>(a.b_stage);
  if (w_.a2a_f[fs] > 0) {
    at = all_to_alls(u, k, pos, a.stage, at, w_.a2a_f[fs], 0);
    priced += w_.a2a_f[fs] * w_.a2a_s[fs];
  }
  if (w_.a2a_b[bs] > 0) {
    at = all_to_alls(u, k, pos, a.b_stage, at, w_.a2a_b[bs], 2);
    priced += w_.a2a_b[bs] * w_.a2a_s[bs];
  }
  Act rest = exec(u, k, pos, std::max(0.0, pc.comm_s - priced), RecKind::TpPad);
  ex_.records[static_cast<size_t>(rest)].comm = CommKind::ExpertParallel;
  add_edge(at, rest);
  Act join = exec(u, k, pos, 0, RecKind::TpPad);
  ex_.records[static_cast<size_t>(join)].comm = CommKind::ExpertParallel;
  add_edge(rest, join);
  add_edge(compute_end, join);
  return join;
}

// The ring's bytes one cp rank sends in an action (cp > 1: Workload::cp_ring_f_bytes).
double Runner::cp_ring_bytes(const Action& a) const { return exchange_share(a, w_.cp_ring_f_bytes, w_.cp_ring_b_bytes); }

// The action's key/value chunks (and, backward, their gradients) go to the next cp rank of the
// unit's ring (Workload::cp_stride apart) as one flow from the action's start, once both ends
// have reached it, beside the compute (which holds the ring's exposed time as the cost table
// prices it: costmodel/cp.h). The action ends when both have: a ring hidden under the compute
// adds nothing, one slowed by other traffic beyond the compute's span delays the action.
Act Runner::cp_ring(int u, int k, int pos, double bytes, Act start, Act compute) {
  const int cp = w_.cp, stride = w_.cp_stride, c = (u % dp_) / stride % cp, first = u - c * stride;
  // A zero-length end, not compute (the memory timeline sees the action once).
  Act join = exec(u, k, pos, 0, RecKind::TpPad);
  ex_.records[static_cast<size_t>(join)].comm = CommKind::ContextParallel;
  add_edge(compute, join);
  group_exchange({1, k, rank_of_unit(u), pos, first}, cp, {u, start, join}, CommKind::ContextParallel,
                 [this, cp, stride, bytes](int from, int to) {
                   const int cf = (from % dp_) / stride % cp;
                   return to == from - cf * stride + (cf + 1) % cp * stride ? bytes : 0.0;
                 });
  return join;
}

}  // namespace stagecraft::sim::detail
