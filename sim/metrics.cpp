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

// The last iteration's records sorted per unit: compute busy intervals, the actions' compute
// records, the copies, and each kind of communication's spans.
struct Collected {
  std::vector<std::vector<Interval>> busy, pp, tp, ep, dp;     // (units) intervals
  std::vector<std::vector<const Record*>> comp, copies;        // (units) records
  std::map<std::tuple<int, int, int, int>, Interval> groups;    // (unit, iteration, position, kind) -> span
  std::map<std::pair<int, int>, Record> inner_actions;          // (unit, position): inner schedules as one
};

void collect_record(Collected& c, const Record& r, int last) {
  const bool lastk = r.iteration == last;
  if (r.kind == RecKind::Compute || r.kind == RecKind::Piece || r.kind == RecKind::TpEnd) {
    if (lastk && r.kind != RecKind::TpEnd) c.busy[static_cast<size_t>(r.unit)].push_back({r.start_s, r.end_s});
    if (lastk && r.kind == RecKind::Compute) c.comp[static_cast<size_t>(r.unit)].push_back(&r);
    if (lastk && r.kind != RecKind::Compute) extend_action(c.inner_actions, r);
    return;
  }
  // A pad ends its collective: an all-to-all's (comm ExpertParallel) or a tp all-reduce's.
  const bool own_kind = r.comm == CommKind::ExpertParallel || r.comm == CommKind::ContextParallel;
  const int kind = r.kind == RecKind::TpPad && !own_kind ? static_cast<int>(CommKind::TensorParallel) : static_cast<int>(r.comm);
  auto key = std::make_tuple(r.unit, r.iteration, r.position, kind);
  auto it = c.groups.find(key);
  if (it == c.groups.end()) c.groups[key] = {r.start_s, r.end_s};
  else it->second = {std::min(it->second.first, r.start_s), std::max(it->second.second, r.end_s)};
  if (lastk && r.kind == RecKind::Flow && r.comm == CommKind::Pipeline) c.pp[static_cast<size_t>(r.peer_unit)].push_back({r.start_s, r.end_s});
  if (lastk && r.kind == RecKind::Flow && r.comm == CommKind::Copy && (r.src_gpu == -1 || r.dst_gpu == -1)) {
    auto& cp = c.copies[static_cast<size_t>(r.unit)];
    if (cp.empty() || cp.back()->position != r.position) cp.push_back(&r);
  }
}

Collected collect(const Execution& ex, int last, int units) {
  Collected c;
  c.busy.resize(static_cast<size_t>(units));
  c.pp = c.tp = c.ep = c.dp = c.busy;
  c.comp.resize(static_cast<size_t>(units));
  c.copies = c.comp;
  for (const Record& r : ex.records)
    if (r.kind != RecKind::Inner) collect_record(c, r, last);  // an inner's pieces, flows and pads are beside it
  for (const auto& [key, r] : c.inner_actions) c.comp[static_cast<size_t>(key.first)].push_back(&r);
  for (const auto& [key, span] : c.groups) {
    auto [u, k, pos, kind] = key;
    if (k != last) continue;
    if (kind == static_cast<int>(CommKind::DataParallel)) c.dp[static_cast<size_t>(u)].push_back(span);
    if (kind == static_cast<int>(CommKind::TensorParallel)) c.tp[static_cast<size_t>(u)].push_back(span);
    if (kind == static_cast<int>(CommKind::ExpertParallel)) c.ep[static_cast<size_t>(u)].push_back(span);
  }
  for (auto& b : c.busy) std::sort(b.begin(), b.end());
  return c;
}

// Per pipeline rank, the largest of f(unit) over its data-parallel copies.
template <class F>
std::vector<double> per_rank_max(int ranks, int dp, F f) {
  std::vector<double> out(static_cast<size_t>(ranks), 0);
  for (int u = 0; u < ranks * dp; ++u) out[static_cast<size_t>(u / dp)] = std::max(out[static_cast<size_t>(u / dp)], f(u));
  return out;
}

double total(const std::vector<Interval>& iv) {
  double sum = 0;
  for (const Interval& x : iv) sum += x.second - x.first;
  return sum;
}

// Compute and idle per rank and the bubbles.
void measure_compute(costmodel::EvalResult& ev, const Collected& c, int R, int dp) {
  const double T = ev.iteration_time_s;
  ev.compute_s = per_rank_max(R, dp, [&](int u) { return total(c.busy[static_cast<size_t>(u)]); });
  double cmax = 0, idle_sum = 0;
  for (int r = 0; r < R; ++r) {
    ev.idle_s.push_back(T - ev.compute_s[static_cast<size_t>(r)]);
    cmax = std::max(cmax, ev.compute_s[static_cast<size_t>(r)]);
    if (T > 0) idle_sum += ev.idle_s.back() / T;
  }
  ev.bubble_over_compute = cmax > 0 ? (T - cmax) / cmax : 0;
  ev.bubble_fraction = T > 0 ? (T - cmax) / T : 0;
  ev.mean_idle_fraction = idle_sum / R;
}

// Each kind of communication's time not under compute, per rank.
void measure_exposed(SimResult& res, const Collected& c, const schedules::Schedule& s, const costmodel::CostTable& t,
                     const SimOptions& opt, int dp) {
  const int R = s.num_ranks;
  auto exposed = [&](const std::vector<std::vector<Interval>>& kind) {
    return per_rank_max(R, dp, [&](int u) { return uncovered(kind[static_cast<size_t>(u)], c.busy[static_cast<size_t>(u)]); });
  };
  res.eval.dp_comm_s = per_rank_max(R, dp, [&](int u) { return total(c.dp[static_cast<size_t>(u)]); });
  res.eval.exposed_dp_comm_s = exposed(c.dp);
  res.exposed_pp_comm_s = exposed(c.pp);
  res.exposed_ep_comm_s = exposed(c.ep);
  if (opt.tp_comm == TpComm::Explicit) {
    res.exposed_tp_comm_s = exposed(c.tp);
    return;
  }
  FoldedTp folded(t);
  res.exposed_tp_comm_s = per_rank_max(R, dp, [&](int u) {
    double sum = 0;
    for (const Record* r : c.comp[static_cast<size_t>(u)])
      sum += folded.of(s.actions[static_cast<size_t>(u / dp)][static_cast<size_t>(r->position)]);
    return sum;
  });
}

// Memory from the one ledger: records carry the unit; the action list is the pipeline rank's.
void measure_memory(costmodel::EvalResult& ev, const Collected& c, const schedules::Schedule& s, const costmodel::CostTable& t, int dp) {
  const int R = s.num_ranks;
  ev.peak_activations.assign(static_cast<size_t>(R), 0);
  ev.peak_activation_bytes.assign(static_cast<size_t>(R), 0);
  ev.peak_host_bytes.assign(static_cast<size_t>(R), 0);
  ev.peak_memory_bytes.assign(static_cast<size_t>(R), 0);
  const std::vector<std::vector<schedules::MemoryEvent>> events = schedules::memory_events(s);
  for (int u = 0; u < R * dp; ++u) {
    const size_t r = static_cast<size_t>(u / dp);
    const costmodel::MemoryPeak p = peak_memory(t, events[r], c.comp[static_cast<size_t>(u)], c.copies[static_cast<size_t>(u)]);
    ev.peak_activation_bytes[r] = std::max(ev.peak_activation_bytes[r], p.gpu_bytes);
    ev.peak_host_bytes[r] = std::max(ev.peak_host_bytes[r], p.host_bytes);
  }
  for (size_t r = 0; r < static_cast<size_t>(R); ++r) {
    ev.peak_activations[r] = costmodel::peak_microbatches_held(t.stages, events[r]);
    ev.peak_memory_bytes[r] = t.static_bytes[r] + ev.peak_activation_bytes[r];
  }
}

void measure_links(SimResult& res, const std::map<std::string, LinkLoad>& links) {
  const double T = res.eval.iteration_time_s;
  std::vector<LinkUse> uses;
  for (const auto& [name, l] : links)
    uses.push_back({name, l.bandwidth_Bps, l.bytes, T > 0 && l.bandwidth_Bps > 0 ? l.bytes / (l.bandwidth_Bps * T) : 0});
  std::sort(uses.begin(), uses.end(), [](const LinkUse& a, const LinkUse& b) { return a.utilisation > b.utilisation || (a.utilisation == b.utilisation && a.name < b.name); });
  if (!uses.empty()) res.busiest_link = uses.front();
  uses.resize(std::min<size_t>(uses.size(), 5));
  res.top_links = uses;
}

// Spans for traces: the first data-parallel copy's compute and streams, every flow of the last iteration.
void record_spans(SimResult& res, const Collected& c, const Execution& ex, int last, int dp) {
  for (const Record& r : ex.records) {
    if (r.unit % dp != 0) continue;
    if (r.kind == RecKind::Compute || r.kind == RecKind::Piece) res.eval.spans.push_back({r.unit / dp, Stream::Compute, r.iteration, r.position, r.start_s, r.end_s});
    if (r.kind == RecKind::Flow && r.iteration == last)
      res.net_spans.push_back({r.src_gpu, r.dst_gpu, r.comm, r.iteration, r.bytes / r.lanes, r.start_s, r.end_s});  // per GPU lane
  }
  for (const auto& [key, span] : c.groups) {
    auto [u, k, pos, kind] = key;
    if (u % dp != 0 || kind == static_cast<int>(CommKind::TensorParallel) || kind == static_cast<int>(CommKind::ExpertParallel) ||
        kind == static_cast<int>(CommKind::ContextParallel))
      continue;
    Stream st = kind == static_cast<int>(CommKind::Pipeline) ? Stream::P2P
                : kind == static_cast<int>(CommKind::DataParallel) ? Stream::Collective : Stream::Copy;
    res.eval.spans.push_back({u / dp, st, k, pos, span.first, span.second});
  }
}

}  // namespace

SimResult summarise(const schedules::Schedule& s, const costmodel::CostTable& c, const Execution& ex,
                    const std::map<std::string, LinkLoad>& links, const SimOptions& opt) {
  const int K = opt.iterations, last = K - 1, dp = ex.dp;
  SimResult res;
  std::vector<double> iter_end(static_cast<size_t>(K), 0);
  for (const Record& r : ex.records) iter_end[static_cast<size_t>(r.iteration)] = std::max(iter_end[static_cast<size_t>(r.iteration)], r.end_s);
  res.eval.iteration_time_s = K >= 2 ? iter_end[static_cast<size_t>(last)] - iter_end[static_cast<size_t>(last - 1)] : iter_end[0];
  for (int k = 0; k < K; ++k)
    res.iteration_times_s.push_back(iter_end[static_cast<size_t>(k)] - (k > 0 ? iter_end[static_cast<size_t>(k - 1)] : 0.0));
  const Collected col = collect(ex, last, s.num_ranks * dp);
  measure_compute(res.eval, col, s.num_ranks, dp);
  measure_exposed(res, col, s, c, opt, dp);
  measure_memory(res.eval, col, s, c, dp);
  measure_links(res, links);
  if (opt.record) record_spans(res, col, ex, last, dp);
  return res;
}

}  // namespace stagecraft::sim
