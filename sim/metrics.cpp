#include "sim/metrics.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "costmodel/inner.h"
#include "costmodel/memory_walk.h"
#include "schedules/memory_events.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::sim {

using costmodel::Span;
using costmodel::Stream;
using schedules::Action;
using schedules::Op;

namespace {

using Interval = std::pair<double, double>;

// Length of the union of `iv` not covered by `busy` (busy: disjoint, sorted).
double uncovered(std::vector<Interval> iv, const std::vector<Interval>& busy) {
  std::sort(iv.begin(), iv.end());
  std::vector<Interval> merged;
  for (const Interval& x : iv) {
    if (!merged.empty() && x.first <= merged.back().second) merged.back().second = std::max(merged.back().second, x.second);
    else merged.push_back(x);
  }
  double out = 0;
  for (const Interval& m : merged) {
    double covered = 0;
    auto it = std::lower_bound(busy.begin(), busy.end(), m.first, [](const Interval& b, double t) { return b.second <= t; });
    for (; it != busy.end() && it->first < m.second; ++it)
      covered += std::max(0.0, std::min(it->second, m.second) - std::max(it->first, m.first));
    out += (m.second - m.first) - covered;
  }
  return out;
}

// Tensor-parallel time a folded action leaves on the compute path: what its inner schedule
// does not hide (costmodel/inner.h; all of it when blocking). An R joined to its backward
// (tp_overlap_joins_recompute) adds what joining it exposes. Tables without inner costs (unit costs: layers = 0) fold
// blocking all-reduces, so their whole folded time.
class FoldedTp {
 public:
  explicit FoldedTp(const costmodel::CostTable& c) : c_(c) {}
  double of(const Action& a) {
    switch (a.op) {
      case Op::F: case Op::B: case Op::I: return exposed(a.stage, a.op);
      case Op::R: return a.fraction * exposed(a.stage, Op::R);
      case Op::OVERLAP_F_B: return exposed(a.stage, Op::F) + exposed(a.b_stage, a.b_op);
      default: return 0;
    }
  }

 private:
  const costmodel::CostTable& c_;
  std::map<std::pair<int, Op>, double> cache_;  // (stage, op) -> exposed time of one action

  double exposed(int stage, Op op) {
    if (auto it = cache_.find({stage, op}); it != cache_.end()) return it->second;
    const costmodel::StageCost& sc = c_.stages[static_cast<size_t>(stage)];
    const costmodel::InnerCosts& ic = sc.inner;
    double x = 0;
    if (ic.layers < 1) {
      x = op == Op::F || op == Op::R ? sc.tp_comm_f_s : sc.tp_comm_i_s;
    } else if (op == Op::R && schedules::tp_overlap_joins_recompute(ic.mode)) {
      const double joint = costmodel::evaluate_inner(costmodel::inner_schedule_for(ic, Op::B, ic.layers), ic).exposed_comm_s;
      x = std::max(0.0, joint - exposed(stage, Op::B));
    } else {
      x = costmodel::evaluate_inner(costmodel::inner_schedule_for(ic, op), ic).exposed_comm_s;
    }
    return cache_[{stage, op}] = x;
  }
};

// An action run as an inner schedule, for the memory timeline: one Compute record from its
// first piece's start to its last TpEnd's end (records come in creation order).
void extend_action(std::map<std::pair<int, int>, Record>& acts, const Record& r) {
  Record& a = acts.try_emplace({r.unit, r.position}, r).first->second;
  a.kind = RecKind::Compute;
  a.start_s = std::min(a.start_s, r.start_s);
  a.end_s = std::max(a.end_s, r.end_s);
}

// One rank's memory peaks over the last iteration's timeline, from the one ledger
// (costmodel/memory_walk.h): its events (schedules/memory_events.h) timed by the records of
// their actions, each stream's in time order (list order at equal times).
costmodel::MemoryPeak peak_memory(const costmodel::CostTable& c, const std::vector<schedules::MemoryEvent>& events,
                                  const std::vector<const Record*>& compute, const std::vector<const Record*>& copies) {
  std::map<int, Interval> at_c, at_y;  // position -> the span of the action's records
  auto span = [](std::map<int, Interval>& at, const Record* r) {
    auto [it, fresh] = at.try_emplace(r->position, Interval{r->start_s, r->end_s});
    if (!fresh) it->second = {std::min(it->second.first, r->start_s), std::max(it->second.second, r->end_s)};
  };
  for (const Record* r : compute) span(at_c, r);
  for (const Record* r : copies) span(at_y, r);
  std::vector<std::pair<double, schedules::MemoryEvent>> ce, ye;
  for (const schedules::MemoryEvent& e : events) {
    const auto& at = e.copy ? at_y : at_c;
    auto it = at.find(e.position);
    if (it == at.end()) continue;  // a copy of no bytes: no transfer recorded
    (e.copy ? ye : ce).push_back({e.at_end ? it->second.second : it->second.first, e});
  }
  auto by_time = [](const auto& x, const auto& y) { return x.first < y.first; };
  std::stable_sort(ce.begin(), ce.end(), by_time);
  std::stable_sort(ye.begin(), ye.end(), by_time);
  std::vector<schedules::MemoryEvent> cev, yev;
  for (const auto& x : ce) cev.push_back(x.second);
  for (const auto& x : ye) yev.push_back(x.second);
  return costmodel::walk_memory(c.stages, cev, [&](size_t i) { return ce[i].first; }, yev, [&](size_t i) { return ye[i].first; },
                                [](double, double) {});
}

}  // namespace

SimResult summarise(const schedules::Schedule& s, const costmodel::CostTable& c, const Execution& ex,
                    const std::map<std::string, LinkLoad>& links, const SimOptions& opt) {
  const int K = opt.iterations, last = K - 1, R = s.num_ranks, dp = ex.dp, U = R * dp;
  SimResult res;
  costmodel::EvalResult& ev = res.eval;
  std::vector<double> iter_end(static_cast<size_t>(K), 0);
  for (const Record& r : ex.records) iter_end[static_cast<size_t>(r.iteration)] = std::max(iter_end[static_cast<size_t>(r.iteration)], r.end_s);
  ev.iteration_time_s = K >= 2 ? iter_end[static_cast<size_t>(last)] - iter_end[static_cast<size_t>(last - 1)] : iter_end[0];
  const double T = ev.iteration_time_s;
  for (int k = 0; k < K; ++k)
    res.iteration_times_s.push_back(iter_end[static_cast<size_t>(k)] - (k > 0 ? iter_end[static_cast<size_t>(k - 1)] : 0.0));

  // Per unit, last iteration: compute busy intervals and the communication of each kind.
  std::vector<std::vector<Interval>> busy(static_cast<size_t>(U)), pp(busy), tp(busy), ep(busy);
  std::vector<std::vector<const Record*>> comp(static_cast<size_t>(U)), copies(comp);
  std::map<std::tuple<int, int, int, int>, Interval> groups;  // (unit, iteration, position, kind) -> span
  std::map<std::pair<int, int>, Record> inner_actions;  // (unit, position), last iteration
  for (const Record& r : ex.records) {
    if (r.kind == RecKind::Inner) continue;  // its pieces, flows and pads are recorded beside it
    const bool lastk = r.iteration == last;
    if (r.kind == RecKind::Compute || r.kind == RecKind::Piece || r.kind == RecKind::TpEnd) {
      if (lastk && r.kind != RecKind::TpEnd) busy[static_cast<size_t>(r.unit)].push_back({r.start_s, r.end_s});
      if (lastk && r.kind == RecKind::Compute) comp[static_cast<size_t>(r.unit)].push_back(&r);
      if (lastk && r.kind != RecKind::Compute) extend_action(inner_actions, r);
      continue;
    }
    // A pad ends its collective: an all-to-all's (comm ExpertParallel) or a tp all-reduce's.
    const bool own_kind = r.comm == CommKind::ExpertParallel || r.comm == CommKind::ContextParallel;
    const int kind = r.kind == RecKind::TpPad && !own_kind ? static_cast<int>(CommKind::TensorParallel) : static_cast<int>(r.comm);
    auto key = std::make_tuple(r.unit, r.iteration, r.position, kind);
    auto it = groups.find(key);
    if (it == groups.end()) groups[key] = {r.start_s, r.end_s};
    else it->second = {std::min(it->second.first, r.start_s), std::max(it->second.second, r.end_s)};
    if (lastk && r.kind == RecKind::Flow && r.comm == CommKind::Pipeline) pp[static_cast<size_t>(r.peer_unit)].push_back({r.start_s, r.end_s});
    if (lastk && r.kind == RecKind::Flow && r.comm == CommKind::Copy && (r.src_gpu == -1 || r.dst_gpu == -1)) {
      auto& cp = copies[static_cast<size_t>(r.unit)];
      if (cp.empty() || cp.back()->position != r.position) cp.push_back(&r);
    }
  }
  for (const auto& [key, r] : inner_actions) comp[static_cast<size_t>(key.first)].push_back(&r);
  std::vector<std::vector<Interval>> dpi(static_cast<size_t>(U));
  for (const auto& [key, span] : groups) {
    auto [u, k, pos, kind] = key;
    if (k != last) continue;
    if (kind == static_cast<int>(CommKind::DataParallel)) dpi[static_cast<size_t>(u)].push_back(span);
    if (kind == static_cast<int>(CommKind::TensorParallel)) tp[static_cast<size_t>(u)].push_back(span);
    if (kind == static_cast<int>(CommKind::ExpertParallel)) ep[static_cast<size_t>(u)].push_back(span);
  }
  for (auto& b : busy) std::sort(b.begin(), b.end());

  auto per_rank_max = [&](auto f) {
    std::vector<double> out(static_cast<size_t>(R), 0);
    for (int u = 0; u < U; ++u) out[static_cast<size_t>(u / dp)] = std::max(out[static_cast<size_t>(u / dp)], f(u));
    return out;
  };
  ev.compute_s = per_rank_max([&](int u) {
    double sum = 0;
    for (const Interval& b : busy[static_cast<size_t>(u)]) sum += b.second - b.first;
    return sum;
  });
  double cmax = 0, idle_sum = 0;
  for (int r = 0; r < R; ++r) {
    ev.idle_s.push_back(T - ev.compute_s[static_cast<size_t>(r)]);
    cmax = std::max(cmax, ev.compute_s[static_cast<size_t>(r)]);
    if (T > 0) idle_sum += ev.idle_s.back() / T;
  }
  ev.bubble_over_compute = cmax > 0 ? (T - cmax) / cmax : 0;
  ev.bubble_fraction = T > 0 ? (T - cmax) / T : 0;
  ev.mean_idle_fraction = idle_sum / R;
  ev.dp_comm_s = per_rank_max([&](int u) {
    double sum = 0;
    for (const Interval& x : dpi[static_cast<size_t>(u)]) sum += x.second - x.first;
    return sum;
  });
  ev.exposed_dp_comm_s = per_rank_max([&](int u) { return uncovered(dpi[static_cast<size_t>(u)], busy[static_cast<size_t>(u)]); });
  res.exposed_pp_comm_s = per_rank_max([&](int u) { return uncovered(pp[static_cast<size_t>(u)], busy[static_cast<size_t>(u)]); });
  FoldedTp folded(c);
  res.exposed_tp_comm_s = per_rank_max([&](int u) {
    if (opt.tp_comm == TpComm::Explicit) return uncovered(tp[static_cast<size_t>(u)], busy[static_cast<size_t>(u)]);
    double sum = 0;
    for (const Record* r : comp[static_cast<size_t>(u)])
      sum += folded.of(s.actions[static_cast<size_t>(u / dp)][static_cast<size_t>(r->position)]);
    return sum;
  });

  res.exposed_ep_comm_s = per_rank_max([&](int u) { return uncovered(ep[static_cast<size_t>(u)], busy[static_cast<size_t>(u)]); });

  // Memory: records carry the unit; the action list is the pipeline rank's.
  ev.peak_activations.assign(static_cast<size_t>(R), 0);
  ev.peak_activation_bytes.assign(static_cast<size_t>(R), 0);
  ev.peak_host_bytes.assign(static_cast<size_t>(R), 0);
  ev.peak_memory_bytes.assign(static_cast<size_t>(R), 0);
  const std::vector<std::vector<schedules::MemoryEvent>> events = schedules::memory_events(s);
  for (int u = 0; u < U; ++u) {
    const size_t r = static_cast<size_t>(u / dp);
    const costmodel::MemoryPeak p = peak_memory(c, events[r], comp[static_cast<size_t>(u)], copies[static_cast<size_t>(u)]);
    ev.peak_activation_bytes[r] = std::max(ev.peak_activation_bytes[r], p.gpu_bytes);
    ev.peak_host_bytes[r] = std::max(ev.peak_host_bytes[r], p.host_bytes);
  }
  for (int r = 0; r < R; ++r) {
    ev.peak_activations[static_cast<size_t>(r)] = costmodel::peak_microbatches_held(c.stages, events[static_cast<size_t>(r)]);
    ev.peak_memory_bytes[static_cast<size_t>(r)] = c.static_bytes[static_cast<size_t>(r)] + ev.peak_activation_bytes[static_cast<size_t>(r)];
  }

  // Links.
  std::vector<LinkUse> uses;
  for (const auto& [name, l] : links)
    uses.push_back({name, l.bandwidth_Bps, l.bytes, T > 0 && l.bandwidth_Bps > 0 ? l.bytes / (l.bandwidth_Bps * T) : 0});
  std::sort(uses.begin(), uses.end(), [](const LinkUse& a, const LinkUse& b) { return a.utilisation > b.utilisation || (a.utilisation == b.utilisation && a.name < b.name); });
  if (!uses.empty()) res.busiest_link = uses.front();
  uses.resize(std::min<size_t>(uses.size(), 5));
  res.top_links = uses;

  if (opt.record) {
    for (const Record& r : ex.records) {
      if (r.unit % dp != 0) continue;
      if (r.kind == RecKind::Compute || r.kind == RecKind::Piece) ev.spans.push_back({r.unit / dp, Stream::Compute, r.iteration, r.position, r.start_s, r.end_s});
      if (r.kind == RecKind::Flow && r.iteration == last)
        res.net_spans.push_back({r.src_gpu, r.dst_gpu, r.comm, r.iteration, r.bytes / r.lanes, r.start_s, r.end_s});  // per GPU lane
    }
    for (const auto& [key, span] : groups) {
      auto [u, k, pos, kind] = key;
      if (u % dp != 0 || kind == static_cast<int>(CommKind::TensorParallel) || kind == static_cast<int>(CommKind::ExpertParallel) ||
          kind == static_cast<int>(CommKind::ContextParallel))
        continue;
      Stream st = kind == static_cast<int>(CommKind::Pipeline) ? Stream::P2P
                  : kind == static_cast<int>(CommKind::DataParallel) ? Stream::Collective : Stream::Copy;
      ev.spans.push_back({u / dp, st, k, pos, span.first, span.second});
    }
  }
  return res;
}

}  // namespace stagecraft::sim
