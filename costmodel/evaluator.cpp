#include "costmodel/evaluator.h"

#include <algorithm>

#include "costmodel/memory_walk.h"
#include "schedules/error.h"
#include "schedules/validate.h"

namespace stagecraft::costmodel {

using schedules::Op;
using schedules::Schedule;

namespace {

bool has_cross_rank_boundary(const Schedule& s) {
  for (int st = 0; st < s.num_stages; ++st) {
    int nx = s.next_stage(st);
    if (nx >= 0 && s.rank_of(nx) != s.rank_of(st)) return true;
  }
  return false;
}

}  // namespace

Evaluator::Evaluator(const Schedule& lowered, EvalOptions opt) : schedule_(lowered), opt_(opt) {
  if (opt_.iterations < 1)
    throw InputError("evaluator: iterations = " + std::to_string(opt_.iterations) + " is invalid (must be at least 1)");
  if (!schedule_.is_lowered() && has_cross_rank_boundary(schedule_))
    throw InputError("evaluator: schedule '" + schedule_.name +
                     "' has no sends or receives but stages on different ranks; lower() it first");
  schedules::validate(schedule_);
  compile();
}

EvalResult Evaluator::evaluate(const CostTable& c) const {
  const Schedule& s = schedule_;
  const int R = s.num_ranks, K = opt_.iterations;
  if (static_cast<int>(c.stages.size()) != s.num_stages || static_cast<int>(c.optimizer_s.size()) != R ||
      static_cast<int>(c.static_bytes.size()) != R)
    throw InputError("evaluator: cost table has " + std::to_string(c.stages.size()) + " stages and " +
                     std::to_string(c.optimizer_s.size()) + " ranks; schedule '" + s.name + "' has " +
                     std::to_string(s.num_stages) + " and " + std::to_string(R));
  const std::vector<double> slot = flatten_slots(c);
  std::vector<double> start(nodes_.size()), end(nodes_.size()), iter_end(static_cast<size_t>(K), 0.0);
  run_timeline(slot, c, start, end, iter_end);
  EvalResult res;
  res.iteration_time_s = K >= 2 ? iter_end[static_cast<size_t>(K - 1)] - iter_end[static_cast<size_t>(K - 2)] : iter_end[0];
  measure_streams(res, start, end);
  measure_memory(res, c, start, end);
  if (opt_.record) record_spans(res, start, end);
  return res;
}

// The costs as slots: per stage kSlotsPerStage of them, then per rank its optimizer step, its
// parameter gather and the gather's head share.
std::vector<double> Evaluator::flatten_slots(const CostTable& c) const {
  const Schedule& s = schedule_;
  const int R = s.num_ranks;
  std::vector<double> slot(static_cast<size_t>(s.num_stages * kSlotsPerStage + 3 * R), 0.0);
  for (int st = 0; st < s.num_stages; ++st) {
    const StageCost& sc = c.stages[static_cast<size_t>(st)];
    double* p = &slot[static_cast<size_t>(st * kSlotsPerStage)];
    p[kF] = sc.f_s; p[kB] = sc.b_s; p[kI] = sc.i_s; p[kW] = sc.w_s; p[kR] = sc.r_s;
    p[kSendF] = sc.send_f_s; p[kSendB] = sc.send_b_s; p[kReduce] = sc.reduce_grad_s; p[kReduceLatency] = sc.reduce_grad_latency_s;
    p[kOffload] = sc.offload_s; p[kReload] = sc.reload_s;
    p[kOB] = overlapped_backward_s(sc, schedules::Op::B); p[kOI] = overlapped_backward_s(sc, schedules::Op::I);
  }
  const size_t base = static_cast<size_t>(s.num_stages * kSlotsPerStage);
  for (int r = 0; r < R; ++r) {
    const size_t i = static_cast<size_t>(r);
    slot[base + i] = c.optimizer_s[i];
    if (static_cast<int>(c.param_gather_s.size()) == R) slot[base + R + i] = c.param_gather_s[i];
    slot[base + 2 * R + i] = static_cast<int>(c.param_gather_head_share.size()) == R ? c.param_gather_head_share[i] : 1.0;
  }
  return slot;
}

// Every node's start and end in topological order, and each iteration's end.
void Evaluator::run_timeline(const std::vector<double>& slot, const CostTable& c, std::vector<double>& start,
                             std::vector<double>& end, std::vector<double>& iter_end) const {
  const int stage_slots = schedule_.num_stages * kSlotsPerStage;
  const std::uint32_t* pr = preds_.data();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    double t = 0;
    for (std::uint32_t j = n.pred_begin; j < n.pred_end; ++j) t = std::max(t, end[pr[j]]);
    if (n.early > 0) {  // one predecessor, the backward: its gradients for this bucket are ready
      const std::uint32_t b = pr[n.pred_begin];
      t = end[b] - n.early * (end[b] - start[b]);
    }
    if (n.head_slot >= 0) {  // one predecessor, the gather: its first bucket has arrived
      const std::uint32_t g = pr[n.pred_begin];
      t = start[g] + slot[static_cast<size_t>(n.head_slot)] * (end[g] - start[g]);
    }
    double d = 0;
    if (n.slot_a >= 0) d = slot[static_cast<size_t>(n.slot_a)] * n.factor_a;
    if (n.slot_a >= 0 && n.slot_a < stage_slots && n.slot_a % kSlotsPerStage == kR)  // whole layers
      d = slot[static_cast<size_t>(n.slot_a)] * recomputed_layer_share(c.stages[static_cast<size_t>(n.slot_a / kSlotsPerStage)], n.factor_a);
    if (n.slot_a >= 0 && n.slot_a % kSlotsPerStage == kReduce && n.factor_a != 1) {
      // A share f of the reduction (a bucket) pays the collective's whole latency: a + f (T - a).
      const double lat = std::min(slot[static_cast<size_t>(n.slot_a - kReduce + kReduceLatency)], slot[static_cast<size_t>(n.slot_a)]);
      d = lat + n.factor_a * (slot[static_cast<size_t>(n.slot_a)] - lat);
    }
    if (n.copy) {  // what the forward kept (kept_activation_bytes: recomputation by whole layers)
      const StageCost& sc = c.stages[static_cast<size_t>(n.slot_a / kSlotsPerStage)];
      if (sc.act_bytes > 0) d *= kept_activation_bytes(sc, n.kept_fraction) / sc.act_bytes;
    }
    if (n.slot_b >= 0) d += slot[static_cast<size_t>(n.slot_b)];
    start[i] = t;
    end[i] = t + d;
    double& e = iter_end[static_cast<size_t>(n.iteration)];
    e = std::max(e, end[i]);
  }
}

// Compute and idle per rank, bubbles, and the communication stream's busy and exposed time in
// the last iteration.
void Evaluator::measure_streams(EvalResult& res, const std::vector<double>& start, const std::vector<double>& end) const {
  const int R = schedule_.num_ranks;
  const double T = res.iteration_time_s;
  res.compute_s.assign(static_cast<size_t>(R), 0.0);
  for (int r = 0; r < R; ++r)
    for (std::uint32_t id : compute_last_[static_cast<size_t>(r)]) res.compute_s[static_cast<size_t>(r)] += end[id] - start[id];
  res.idle_s.resize(static_cast<size_t>(R));
  double cmax = 0, idle_frac_sum = 0;
  for (int r = 0; r < R; ++r) {
    res.idle_s[static_cast<size_t>(r)] = T - res.compute_s[static_cast<size_t>(r)];
    cmax = std::max(cmax, res.compute_s[static_cast<size_t>(r)]);
    if (T > 0) idle_frac_sum += res.idle_s[static_cast<size_t>(r)] / T;
  }
  res.bubble_over_compute = cmax > 0 ? (T - cmax) / cmax : 0;
  res.bubble_fraction = T > 0 ? (T - cmax) / T : 0;
  res.mean_idle_fraction = idle_frac_sum / R;
  res.dp_comm_s.assign(static_cast<size_t>(R), 0.0);
  res.exposed_dp_comm_s.assign(static_cast<size_t>(R), 0.0);
  // Compute nodes of one rank run one after another, so their intervals are already in time
  // order; each reduction's exposed part is its length minus its overlap with them.
  for (int r = 0; r < R; ++r) {
    const auto& busy = compute_last_[static_cast<size_t>(r)];
    for (std::uint32_t c : coll_last_[static_cast<size_t>(r)]) {
      const double cs = start[c], ce = end[c];
      double covered = 0;
      auto it = std::lower_bound(busy.begin(), busy.end(), cs, [&](std::uint32_t id, double t) { return end[id] <= t; });
      for (; it != busy.end() && start[*it] < ce; ++it) covered += std::max(0.0, std::min(end[*it], ce) - std::max(start[*it], cs));
      res.dp_comm_s[static_cast<size_t>(r)] += ce - cs;
      res.exposed_dp_comm_s[static_cast<size_t>(r)] += (ce - cs) - covered;
    }
  }
}

// Microbatches held and the memory peaks, from the one ledger (memory_walk.h).
void Evaluator::measure_memory(EvalResult& res, const CostTable& c, const std::vector<double>& start,
                               const std::vector<double>& end) const {
  const int R = schedule_.num_ranks;
  res.peak_activations.assign(static_cast<size_t>(R), 0.0);
  for (int r = 0; r < R; ++r) res.peak_activations[static_cast<size_t>(r)] = peak_microbatches_held(c.stages, mem_all_[static_cast<size_t>(r)]);
  res.peak_activation_bytes.assign(static_cast<size_t>(R), 0.0);
  res.peak_host_bytes.assign(static_cast<size_t>(R), 0.0);
  res.peak_memory_bytes.assign(static_cast<size_t>(R), 0.0);
  if (!opt_.memory) return;
  if (opt_.record) res.memory_timeline.assign(static_cast<size_t>(R), {});
  for (int r = 0; r < R; ++r) {
    const size_t ri = static_cast<size_t>(r);
    auto timed = [&](const std::vector<schedules::MemoryEvent>& ev, const std::vector<std::uint32_t>& node) {
      return [&](size_t i) { return ev[i].at_end ? end[node[i]] : start[node[i]]; };
    };
    const double static_bytes = c.static_bytes[ri];
    const MemoryPeak p = walk_memory(c.stages, mem_compute_[ri], timed(mem_compute_[ri], mem_compute_node_[ri]), mem_copy_[ri],
                                     timed(mem_copy_[ri], mem_copy_node_[ri]), [&](double t, double gpu) {
                                       if (opt_.record) res.memory_timeline[ri].push_back({t, static_bytes + gpu});
                                     });
    res.peak_activation_bytes[ri] = p.gpu_bytes;
    res.peak_host_bytes[ri] = p.host_bytes;
    res.peak_memory_bytes[ri] = static_bytes + p.gpu_bytes;
  }
}

void Evaluator::record_spans(EvalResult& res, const std::vector<double>& start, const std::vector<double>& end) const {
  const Schedule& s = schedule_;
  res.spans.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.stream == Stream::Compute && !n.is_compute) continue;  // posts and issues
    if (n.slot_a < 0 && n.slot_b < 0 && !n.is_compute) continue;  // a gather's first bucket or its join: no work
    const bool gather = n.stream == Stream::Collective && n.slot_a >= s.num_stages * kSlotsPerStage;
    if (gather && end[i] == start[i]) continue;  // no distributed optimizer: no parameter all-gather
    res.spans.push_back({n.rank, n.stream, n.iteration, n.position, start[i], end[i]});
  }
}

}  // namespace stagecraft::costmodel
