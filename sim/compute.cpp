// Compute actions in the simulator's graph. Folded tensor parallelism: one exec per action of
// the cost table's duration. Explicit: blocking stages run the action's compute as one exec and
// its all-reduces as one aggregated ring after it; stages with a tp overlap mode run the
// action's inner schedule (schedules/tp_overlap.h): one exec per compute piece on the compute
// stream, one ring all-reduce over the tp group per collective on the communication stream,
// each after the pieces it reads (docs/sim.md, "Tensor-parallel overlap").
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/memory_events.h"
#include "schedules/tp_overlap.h"
#include "costmodel/overlapped_pair.h"
#include "sim/runner.h"

namespace stagecraft::sim::detail {

using schedules::Action;
using schedules::Op;
using schedules::PieceKind;

double Runner::duration(const Action& a, int rank, double* tp_s, double* tp_count) const {
  auto st = [&](int i) -> const costmodel::StageCost& { return c_.stages[static_cast<size_t>(i)]; };
  *tp_s = 0;
  *tp_count = 0;
  auto tp_i = [&](int i) { *tp_s += st(i).tp_comm_i_s; *tp_count += st(i).tp_allreduces_i; };
  switch (a.op) {
    case Op::F: *tp_s = st(a.stage).tp_comm_f_s; *tp_count = st(a.stage).tp_allreduces_f; return st(a.stage).f_s;
    case Op::B: tp_i(a.stage); return st(a.stage).b_s;
    case Op::I: tp_i(a.stage); return st(a.stage).i_s;
    case Op::W: return st(a.stage).w_s;
    case Op::R: {
      const double f = costmodel::recomputed_layer_share(st(a.stage), a.fraction);  // whole layers
      *tp_s = f * st(a.stage).tp_comm_f_s;
      *tp_count = f * st(a.stage).tp_allreduces_f;
      return f * st(a.stage).r_s;
    }
    case Op::OVERLAP_F_B:
      *tp_s = st(a.stage).tp_comm_f_s;
      *tp_count = st(a.stage).tp_allreduces_f;
      tp_i(a.b_stage);
      return st(a.stage).f_s + costmodel::overlapped_backward_s(st(a.b_stage), a.b_op);
    case Op::OPTIMIZER: return c_.optimizer_s[static_cast<size_t>(rank)];
    default: return 0;
  }
}

// `count` ring all-reduces of the stage's tensor-parallel buffer, aggregated, after all of
// `after`: each ring member sends count * 2(t-1)/t * S bytes to the next at once (the ring's
// bandwidth term, sharing links as the steps would), then a pad adds the remaining
// 2(t-1)*count - 1 step latencies (the flow itself carries one). Returns the pad: their end.
Act Runner::tp_collectives(int u, int k, int pos, int stage, const std::vector<Act>& after, double count) {
  Act pad = exec(u, k, pos, tp_pad_s(count), RecKind::TpPad);
  for (int j = 0; j < flows_per_group(); ++j) {
    Act f = add(tp_flow(u, k, pos, stage, j, count));
    for (Act a : after) add_edge(a, f);
    add_edge(f, pad);
  }
  return pad;
}

// Lane j's flow of `count` aggregated ring all-reduces: count * 2(t-1)/t * S bytes to the next
// member (tp_collectives).
Record Runner::tp_flow(int u, int k, int pos, int stage, int j, double count) const {
  const int t = tp_;
  Record r;
  r.unit = r.peer_unit = u;
  r.iteration = k;
  r.position = pos;
  r.src_gpu = gpu(u, j);
  r.dst_gpu = gpu(u, (j + 1) % t);
  r.comm = CommKind::TensorParallel;
  r.kind = RecKind::Flow;
  r.lanes = lanes();
  r.bytes = std::max(0.0, 2.0 * (t - 1) * count / t * w_.tp_bytes[static_cast<size_t>(stage)]) * lanes();
  r.work = r.bytes;
  r.from = pf_.gpus[static_cast<size_t>(r.src_gpu)];
  r.to = lanes() > 1 ? pf_.tp_peer[static_cast<size_t>(r.src_gpu)] : pf_.gpus[static_cast<size_t>(r.dst_gpu)];
  return r;
}

// The step latencies of `count` ring all-reduces the flow does not carry: 2(t-1) count - 1.
double Runner::tp_pad_s(double count) const { return std::max(0.0, 2.0 * (tp_ - 1) * count - 1) * w_.tp_alpha_s; }

// Whether the action runs its inner schedule: explicit tp, and a stage with a tp overlap mode
// (blocking stages keep one exec and one aggregated ring unless SimOptions::inner_blocking:
// the same times, about ten times fewer activities).
bool Runner::runs_inner(const Action& a) const {
  if (opt_.tp_comm != TpComm::Explicit || tp_ <= 1) return false;
  auto overlapped = [&](int stage) {
    const costmodel::InnerCosts& ic = c_.stages[static_cast<size_t>(stage)].inner;
    return ic.mode != schedules::TpOverlap::Blocking || (opt_.inner_blocking && ic.layers > 0);
  };
  switch (a.op) {
    case Op::F: case Op::B: case Op::I: case Op::R: return overlapped(a.stage);
    case Op::OVERLAP_F_B: return overlapped(a.stage) || overlapped(a.b_stage);
    default: return false;  // W has no collective: one exec of w_s is its inner schedule's time
  }
}

// The stage's inner schedule for `op` of microbatch mb. An R of fraction f recomputes the
// first schedules::recomputed_layers(f, layers) layers: as its own schedule when blocking, inside the backward's
// schedule in the modes that split (tp_overlap_joins_recompute: merak, cross-pass, oases).
InnerPart Runner::inner_part(int stage, Op op, int mb) const {
  const costmodel::StageCost& sc = c_.stages[static_cast<size_t>(stage)];
  if (sc.inner.layers < 1)
    throw InputError("simulator: cost table stage " + std::to_string(stage) + " has tp_overlap '" +
                     std::string(schedules::tp_overlap_name(sc.inner.mode)) +
                     "' but no inner schedule costs (inner.layers = 0); explicit tensor parallelism needs them "
                     "(use --tp-comm folded)");
  InnerPart p;
  p.stage = stage;
  p.costs = sc.inner;
  p.op = op;
  auto it = r_fraction_.find({stage, mb});
  const int n = it == r_fraction_.end() ? 0 : schedules::recomputed_layers(it->second, sc.inner.layers);
  if (op == Op::R) p.costs.layers = n;
  if ((op == Op::B || op == Op::I) && schedules::tp_overlap_joins_recompute(sc.inner.mode)) p.recompute_layers = n;
  return p;
}

// The inner schedules an action runs, in order; none for an R whose recomputation the
// backward's schedule carries (merak, cross-pass, oases) or that rounds to no layer.
std::vector<InnerPart> Runner::inner_parts(const Action& a) const {
  switch (a.op) {
    case Op::F: case Op::B: case Op::I: return {inner_part(a.stage, a.op, a.microbatch)};
    case Op::R: {
      InnerPart p = inner_part(a.stage, Op::R, a.microbatch);
      if (schedules::tp_overlap_joins_recompute(p.costs.mode) || p.costs.layers == 0) return {};
      return {p};
    }
    case Op::OVERLAP_F_B:
      return {inner_part(a.stage, Op::F, a.microbatch), inner_part(a.b_stage, a.b_op, a.b_microbatch)};
    default: return {};
  }
}

// The parts one after another. In each, compute pieces run in issue order on the compute
// stream and collectives in issue order on the communication stream, each also after the
// pieces it reads, both streams from a zero-length TpEnd that starts the part; another waits for
// both streams' last piece and ends it.
Act Runner::inner_action(int u, int k, int pos, Act prev, const std::vector<InnerPart>& parts, Act* first) {
  for (const InnerPart& part : parts) {
    const schedules::InnerSchedule s = costmodel::inner_schedule_for(part.costs, part.op, part.recompute_layers);
    std::vector<Act> end(s.pieces.size(), kNone);
    // The part's start, after what ran before it and (the first part) the action's inputs: both
    // streams begin there (te's first collective, a chunk's all-gather, reads no piece).
    Act start = exec(u, k, pos, 0, RecKind::TpEnd);
    add_edge(prev, start);
    if (*first == kNone) *first = start;
    Act compute = start, comm = start;
    for (size_t i = 0; i < s.pieces.size(); ++i) {
      const schedules::Piece& p = s.pieces[i];
      std::vector<Act> after;
      for (int d : p.deps) after.push_back(end[static_cast<size_t>(d)]);
      if (p.kind == PieceKind::Comm) {
        after.push_back(comm);
        comm = end[i] = tp_collectives(u, k, pos, part.stage, after, p.fraction);
        continue;
      }
      Act e = exec(u, k, pos, costmodel::piece_duration(p, part.op, part.costs), RecKind::Piece);
      add_edge(compute, e);
      for (Act x : after) add_edge(x, e);
      compute = end[i] = e;
    }
    prev = exec(u, k, pos, 0, RecKind::TpEnd);
    add_edge(compute, prev);
    add_edge(comm, prev);
  }
  return prev;
}

// Whether every tensor-parallel group's collectives have their links to themselves: no
// platform file, each group inside one node and alone there (no other unit's GPU on it, so no
// pipeline or data-parallel flow between two of its GPUs' ports). Then an action's inner
// schedule takes the same time wherever and whenever it runs: its compute pieces on a GPU
// nothing else computes on, its collectives one after the other on links nothing else uses.
bool Runner::inner_isolated() const {
  if (!opt_.platform_file.empty()) return false;
  std::unordered_map<int, int> unit_on;  // node -> the unit on it
  for (int u = 0; u < U_; ++u)
    for (int t = 0; t < tp_; ++t) {
      const int n = topo_.node_of(gpu(u, t));
      if (n != topo_.node_of(gpu(u, 0))) return false;
      if (!unit_on.emplace(n, u).second && unit_on[n] != u) return false;
    }
  return true;
}

// A part's pieces timed as the full simulation runs them on an isolated group: compute pieces
// for their durations, each collective's flow for its route's latency plus bytes over its
// narrowest link (alone on it), then its pad.
const Runner::InnerTimes& Runner::inner_times(int u, const InnerPart& part) {
  const auto key = std::make_tuple(part.stage, static_cast<int>(part.op), part.costs.layers, part.recompute_layers);
  if (auto it = inner_memo_.find(key); it != inner_memo_.end()) return it->second;
  InnerTimes it;
  it.schedule = costmodel::inner_schedule_for(part.costs, part.op, part.recompute_layers);
  it.flow_s.assign(it.schedule.pieces.size(), 0);
  std::vector<double> d;
  for (size_t i = 0; i < it.schedule.pieces.size(); ++i) {
    const schedules::Piece& p = it.schedule.pieces[i];
    if (p.kind != PieceKind::Comm) {
      d.push_back(costmodel::piece_duration(p, part.op, part.costs));
      continue;
    }
    for (int j = 0; j < flows_per_group(); ++j) {
      const Record f = tp_flow(u, 0, 0, part.stage, j, p.fraction);
      std::vector<sg::Link*> links;
      double lat = 0, bw = std::numeric_limits<double>::infinity();
      f.from->route_to(f.to, links, &lat);
      for (sg::Link* l : links) bw = std::min(bw, l->get_bandwidth());
      it.flow_s[i] = std::max(it.flow_s[i], lat + (links.empty() ? 0 : f.bytes / bw));
    }
    d.push_back(it.flow_s[i] + tp_pad_s(p.fraction));
  }
  it.result = costmodel::evaluate_inner(it.schedule, d);
  return inner_memo_[key] = std::move(it);
}

// The action's inner schedules as one exec of their summed two-stream times.
Act Runner::inner_block(int u, int k, int pos, Act prev, std::vector<InnerPart> parts, Act* first) {
  double total = 0;
  for (const InnerPart& part : parts) total += inner_times(u, part).result.time_s;
  Act e = exec(u, k, pos, total, RecKind::Inner);
  add_edge(prev, e);
  *first = e;
  blocks_.push_back({e, u, k, pos, std::move(parts)});
  return e;
}

// After the run: each collapsed action's pieces, flows, pads and ends at the times the full
// simulation gives them (inner_action's records, offset by the block's start). Without a trace
// (SimOptions::record) only what the metrics read: back-to-back compute pieces as one, and per
// part one flow with all its collectives' bytes and one pad from its first collective's start
// to its last's end (metrics.cpp takes an action's tensor-parallel span from first to last).
void Runner::expand_blocks() {
  const bool every = opt_.record;
  for (const Block& b : blocks_) {
    double t0 = ex_.records[static_cast<size_t>(b.id)].start_s;
    for (const InnerPart& part : b.parts) {
      const InnerTimes& it = inner_times(b.unit, part);
      Record begin = exec_record(b.unit, b.iteration, b.position, 0, RecKind::TpEnd);
      begin.start_s = begin.end_s = t0;
      add(begin);
      Record run;  // compute pieces back to back so far (start_s < 0: none)
      Record flows = tp_flow(b.unit, b.iteration, b.position, part.stage, 0, 0), pad = exec_record(b.unit, b.iteration, b.position, 0, RecKind::TpPad);
      pad.start_s = flows.start_s = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < it.schedule.pieces.size(); ++i) {
        const schedules::Piece& p = it.schedule.pieces[i];
        const double start = t0 + it.result.start_s[i], end = t0 + it.result.end_s[i];
        if (p.kind != PieceKind::Comm) {
          if (run.start_s >= 0 && (every || run.end_s != start)) add(run);
          if (run.start_s < 0 || every || run.end_s != start) {
            run = exec_record(b.unit, b.iteration, b.position, 0, RecKind::Piece);
            run.start_s = start;
          }
          run.end_s = end;
          run.work += (end - start) * run.from->get_speed();
          continue;
        }
        for (int j = 0; j < flows_per_group(); ++j) {
          Record f = tp_flow(b.unit, b.iteration, b.position, part.stage, j, p.fraction);
          if (!every) {
            flows.bytes += f.bytes, flows.work += f.work;
            flows.start_s = std::min(flows.start_s, start), flows.end_s = std::max(flows.end_s, start + it.flow_s[i]);
            continue;
          }
          f.start_s = start;
          f.end_s = start + it.flow_s[i];
          add(f);
        }
        if (!every) {
          pad.start_s = std::min(pad.start_s, start), pad.end_s = std::max(pad.end_s, end);
          continue;
        }
        Record r = exec_record(b.unit, b.iteration, b.position, tp_pad_s(p.fraction), RecKind::TpPad);
        r.start_s = start + it.flow_s[i];
        r.end_s = end;
        add(r);
      }
      if (run.start_s >= 0) add(run);
      if (!every && pad.end_s >= 0) add(flows), add(pad);
      t0 += it.result.time_s;
      Record e = exec_record(b.unit, b.iteration, b.position, 0, RecKind::TpEnd);
      e.start_s = e.end_s = t0;
      add(e);
    }
  }
}

// Seconds of lane flows of `count` aggregated ring all-reduces of the stage alone on their links
// (an isolated group: inner_isolated): the route's latency plus the bytes over its narrowest link.
double Runner::ring_alone_s(int u, int stage, double count) const {
  double out = 0;
  for (int j = 0; j < flows_per_group(); ++j) {
    const Record f = tp_flow(u, 0, 0, stage, j, count);
    std::vector<sg::Link*> links;
    double lat = 0, bw = std::numeric_limits<double>::infinity();
    f.from->route_to(f.to, links, &lat);
    for (sg::Link* l : links) bw = std::min(bw, l->get_bandwidth());
    out = std::max(out, lat + (links.empty() ? 0 : f.bytes / bw));
  }
  return out;
}

// A blocking action of an isolated group (inner_isolated) as one exec: its compute, then its
// aggregated ring (tp_collectives) alone on the group's links, then the ring's pad; the three
// records are made at their times after the run (expand_rings), as the full graph runs them.
Act Runner::ring_block(int u, int k, int pos, int stage, double compute_s, double count, Act prev, Act* first) {
  const double c = perturbed(u, k, pos, compute_s, RecKind::Compute);
  const double f = ring_alone_s(u, stage, count);
  Act e = add(exec_record(u, k, pos, c + f + tp_pad_s(count), RecKind::Inner));
  add_edge(prev, e);
  *first = e;
  ring_blocks_.push_back({e, stage, c, f, count});
  return e;
}

void Runner::expand_rings() {
  for (const RingBlock& b : ring_blocks_) {
    const Record x = ex_.records[static_cast<size_t>(b.id)];
    Record c = exec_record(x.unit, x.iteration, x.position, b.compute_s, RecKind::Compute);
    c.start_s = x.start_s;
    c.end_s = x.start_s + b.compute_s;
    add(c);
    for (int j = 0; j < flows_per_group(); ++j) {
      Record f = tp_flow(x.unit, x.iteration, x.position, b.stage, j, b.count);
      f.start_s = c.end_s;
      f.end_s = c.end_s + b.flow_s;
      add(f);
    }
    Record pad = exec_record(x.unit, x.iteration, x.position, tp_pad_s(b.count), RecKind::TpPad);
    pad.start_s = c.end_s + b.flow_s;
    pad.end_s = x.end_s;
    add(pad);
  }
}

// One compute action after `prev` (the unit's compute stream so far); sets *first to the
// activity its inputs must precede and returns the one that ends it.
Act Runner::compute_action(int u, int k, int pos, Act prev, Act* first) {
  const int r = rank_of_unit(u);
  const Action& a = s_.actions[static_cast<size_t>(r)][static_cast<size_t>(pos)];
  *first = kNone;
  double tp_s = 0, count = 0, d = 0;  // an inner-schedule action without parts has zero length
  if (runs_inner(a)) {
    std::vector<InnerPart> parts = inner_parts(a);
    if (!parts.empty())
      return collapse_inner_ ? inner_block(u, k, pos, prev, std::move(parts), first) : inner_action(u, k, pos, prev, parts, first);
  } else {
    d = duration(a, r, &tp_s, &count);
  }
  const bool ring = opt_.tp_comm == TpComm::Explicit && tp_ > 1 && count > 0;
  const double a2a = all_to_all_count(a), a2a_s = a2a > 0 ? a2a * w_.a2a_s[static_cast<size_t>(a.stage)] : 0;
  auto cut = bucket_cuts_.find({r, pos});
  const double cpb = cut == bucket_cuts_.end() ? cp_ring_bytes(a) : 0;  // the ring's, beside the compute
  const double comm_s = (ring ? tp_s : 0) + a2a_s;  // what leaves the compute exec for flows after it
  if (comm_s > d + 1e-15)
    throw InputError("simulator: stage " + std::to_string(a.stage) + " folds " + std::to_string(comm_s) +
                     " s of tensor- and expert-parallel communication into a " + std::to_string(d) + " s action (must be at most it)");
  double compute_s = d - comm_s;
  // DualPipe's overlapped pair with experts: its compute (with what the SMs held by communication
  // take from it, costmodel/overlapped_pair.h) and, beside it from a zero-length start the
  // action's inputs precede, its halves' all-to-alls as flows (pair_all_to_alls).
  const bool pair = pair_runs_all_to_alls(a);
  costmodel::OverlappedPair pc;
  Act pair_start = kNone;
  if (pair) {
    pc = pair_costs(a);
    compute_s = pc.busy_s - (ring ? tp_s : 0);
    if (compute_s < -1e-15)
      throw InputError("simulator: overlapped pair at rank " + std::to_string(r) + " step " + std::to_string(pos) + " folds " +
                       std::to_string(tp_s) + " s of tensor-parallel all-reduces into " + std::to_string(pc.busy_s) +
                       " s of compute (must be at most it)");
    pair_start = exec(u, k, pos, 0, RecKind::TpPad);
    ex_.records[static_cast<size_t>(pair_start)].comm = CommKind::ExpertParallel;
    add_edge(prev, pair_start);
    prev = pair_start;
  }
  if (ring && collapse_rings_ && !pair && a2a <= 0 && cut == bucket_cuts_.end() && cpb <= 0)
    return ring_block(u, k, pos, a.stage, compute_s, count, prev, first);
  Act e = kNone;
  if (cut != bucket_cuts_.end()) {  // a backward whose gradient buckets are ready inside it
    e = split_backward(u, k, pos, compute_s, prev, cut->second);
    *first = first_piece_;
  } else if (cpb > 0) {
    // Context parallelism: the compute (with the ring's exposed time), the ring beside it, both
    // from a zero-length start the action's inputs precede.
    Act start = exec(u, k, pos, 0, RecKind::TpPad);
    ex_.records[static_cast<size_t>(start)].comm = CommKind::ContextParallel;
    add_edge(prev, start);
    *first = start;
    Act c = exec(u, k, pos, d - comm_s, RecKind::Compute);
    add_edge(start, c);
    e = cp_ring(u, k, pos, cpb, start, c);
  } else {
    e = exec(u, k, pos, compute_s, RecKind::Compute);
    add_edge(prev, e);
    *first = e;
  }
  if (a2a > 0) e = all_to_alls(u, k, pos, a.stage, e, a2a);
  if (ring) e = tp_collectives(u, k, pos, a.stage, {e}, count);
  if (!pair) return e;
  *first = pair_start;
  return pair_all_to_alls(u, k, pos, a, pair_start, e, pc);
}

// The backward at pos as pieces that end where its buckets' gradients are ready: at (1 - early)
// of its duration for each early REDUCE_GRAD issued from it (schedules/buckets.h). Each bucket's
// issue is the piece that ends at its point; the pieces together last `seconds`.
Act Runner::split_backward(int u, int k, int pos, double seconds, Act prev, const std::vector<std::pair<double, int>>& cuts) {
  double done = 0;
  first_piece_ = kNone;
  for (const auto& [early, rg_pos] : cuts) {  // by decreasing early: in time order
    const double at = (1 - early) * seconds;
    Act e = exec(u, k, pos, at - done, RecKind::Piece);
    add_edge(prev, e);
    if (first_piece_ == kNone) first_piece_ = e;
    bucket_ready_[std::make_tuple(k, u, rg_pos)] = e;
    prev = e;
    done = at;
  }
  Act e = exec(u, k, pos, seconds - done, RecKind::Piece);
  add_edge(prev, e);
  Act end = exec(u, k, pos, 0, RecKind::TpEnd);  // the action's end, as after an inner schedule
  add_edge(e, end);
  return end;
}

double Runner::perturbed(int u, int k, int pos, double seconds, RecKind kind) {
  if (seconds <= 0 || (kind != RecKind::Compute && kind != RecKind::Piece && kind != RecKind::Inner)) return seconds;
  const size_t i = static_cast<size_t>(u);
  if (!fx_.rate.empty()) seconds /= fx_.rate[i];
  if (draws_.empty()) return seconds;
  if (drawn_at_[i] != std::pair{k, pos}) {  // one draw per compute action, for all its pieces
    drawn_at_[i] = {k, pos};
    drawn_[i] = draws_[i].next();
  }
  return seconds * drawn_[i];
}

// A what-if's late start: a wait of the unit's delay (a pad, taking nothing from its GPU) that
// its first action follows. Returns it, or kNone.
Act Runner::late_start(int u) {
  if (fx_.delay_s.empty() || fx_.delay_s[static_cast<size_t>(u)] <= 0) return kNone;
  return exec(u, 0, 0, fx_.delay_s[static_cast<size_t>(u)], RecKind::TpPad);
}

void Runner::build_chains() {
  if (fx_.jitter.dist != JitterDist::None && fx_.jitter.cv > 0)
    for (int u = 0; u < U_; ++u) draws_.emplace_back(fx_.jitter, fx_.stream.at(static_cast<size_t>(u)));
  drawn_at_.assign(draws_.size(), {-1, -1});
  drawn_.assign(draws_.size(), 1.0);
  for (const auto& list : s_.actions)
    for (const Action& a : list)
      if (a.op == Op::R) r_fraction_[{a.stage, a.microbatch}] = a.fraction;
  for (int r = 0; r < s_.num_ranks; ++r) {
    const auto& list = s_.actions[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<size_t>(i)];
      if (a.op != Op::REDUCE_GRAD || a.early <= 0) continue;
      const int b = schedules::backward_before(list, i);
      if (runs_inner(list[static_cast<size_t>(b)]))
        throw InputError("simulator: rank " + std::to_string(r) + " step " + std::to_string(i) +
                         ": gradient buckets ready inside a backward that runs its tensor-parallel inner schedule are "
                         "not simulated yet (overlap_grad_reduce with tp_overlap and --tp-comm explicit); use --tp-comm "
                         "folded or no overlap_grad_reduce");
      bucket_cuts_[{r, b}].emplace_back(a.early, i);
    }
  }
  for (auto& [key, cuts] : bucket_cuts_)
    std::sort(cuts.begin(), cuts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  post_.assign(static_cast<size_t>(K_), std::vector<std::vector<Act>>(static_cast<size_t>(U_)));
  compute_ = post_;
  gather_end_.assign(static_cast<size_t>(K_), std::vector<Act>(static_cast<size_t>(U_), kNone));
  gather_tail_ = gather_end_;
  std::vector<Act> last(static_cast<size_t>(U_), kNone);
  for (int u = 0; u < U_; ++u) last[static_cast<size_t>(u)] = late_start(u);
  // Per unit, the iteration whose overlapped gather awaits its join (-1: none) and its optimizer's
  // position, where the join is recorded: a zero-length record at the optimizer's position holds
  // no memory event and no compute time (metrics.cpp), as one at the forward's would.
  std::vector<std::pair<int, int>> tail_of(static_cast<size_t>(U_), {-1, 0});
  for (int k = 0; k < K_; ++k)
    for (int u = 0; u < U_; ++u) {
      const auto& list = s_.actions[static_cast<size_t>(rank_of_unit(u))];
      auto& po = post_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      auto& co = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      po.assign(list.size(), kNone);
      co.assign(list.size(), kNone);
      Act& prev = last[static_cast<size_t>(u)];
      for (size_t i = 0; i < list.size(); ++i) {
        po[i] = prev;
        if (schedules::is_compute(list[i].op)) {
          prev = compute_action(u, k, static_cast<int>(i), prev, &co[i]);
          // An overlapped gather's remaining buckets: the first compute after it ends no earlier.
          if (auto& [g, opt_pos] = tail_of[static_cast<size_t>(u)]; g >= 0 && list[i].op != Op::OPTIMIZER) {
            Act j = exec(u, k, opt_pos, 0, RecKind::Compute);
            add_edge(prev, j);
            prev = gather_tail_[static_cast<size_t>(g)][static_cast<size_t>(u)] = j;
            g = -1;
          }
        }
        // A distributed optimizer's step ends with the parameter all-gather (executor.cpp adds
        // its flows): what follows on the compute stream waits for this zero-length end.
        if (list[i].op == Op::OPTIMIZER && w_.gather_bytes[static_cast<size_t>(rank_of_unit(u))] > 0) {
          Act g = exec(u, k, static_cast<int>(i), 0, RecKind::Compute);
          add_edge(prev, g);
          prev = gather_end_[static_cast<size_t>(k)][static_cast<size_t>(u)] = g;
          if (w_.gather_head_share[static_cast<size_t>(rank_of_unit(u))] < 1) tail_of[static_cast<size_t>(u)] = {k, static_cast<int>(i)};
        }
      }
    }
}

}  // namespace stagecraft::sim::detail
