#include "costmodel/evaluator.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/grid.h"
#include "schedules/validate.h"

namespace stagecraft::costmodel {

using schedules::Action;
using schedules::Op;
using schedules::Schedule;

namespace {

// kAllocRLayer / kFreeFused: an R fused with its backward (costmodel::recompute_fused_with_backward).
// kWorkStart / kWorkEnd: a backward's (B or I) working set, held while it runs (StageCost::work_bytes).
// kFreeI / kFreeW: a split backward's frees, at the end of its I and of its W.
enum MemWhat : std::uint8_t {
  kAllocF, kAllocR, kAllocRLayer, kFree, kFreeFused, kFreeI, kFreeW, kOffloadEnd, kReloadStart, kReloadEnd, kWorkStart, kWorkEnd
};

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

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

void Evaluator::compile() {
  const Schedule& s = schedule_;
  const int K = opt_.iterations, m = s.num_microbatches, R = s.num_ranks;
  const size_t keys = static_cast<size_t>(s.num_stages) * m;
  auto key = [m](int st, int mb) { return static_cast<size_t>(st) * m + mb; };
  const std::int32_t opt_slot_base = s.num_stages * kSlotsPerStage;

  // Pass 1: nodes in creation order (rank, iteration, position), and where sends and
  // receive posts are.
  std::vector<Node> tmp;
  struct Made { std::uint32_t main = kNone, extra = kNone; };
  std::vector<std::vector<std::vector<Made>>> made(static_cast<size_t>(K));  // [k][rank][pos]
  std::vector<std::vector<std::uint32_t>> xfer_f(static_cast<size_t>(K), std::vector<std::uint32_t>(keys, kNone)),
      xfer_b = xfer_f, post_f = xfer_f, post_b = xfer_f;
  for (int k = 0; k < K; ++k) {
    made[static_cast<size_t>(k)].resize(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      auto& mk = made[static_cast<size_t>(k)][static_cast<size_t>(r)];
      mk.resize(list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        Node n;
        n.rank = r;
        n.position = static_cast<std::int32_t>(i);
        n.iteration = k;
        n.stream = Stream::Compute;
        auto slot = [&](int st, Slot sl) { return st * kSlotsPerStage + sl; };
        switch (a.op) {
          case Op::F: n.slot_a = slot(a.stage, kF); n.is_compute = true; break;
          case Op::B: n.slot_a = slot(a.stage, kB); n.is_compute = true; break;
          case Op::I: n.slot_a = slot(a.stage, kI); n.is_compute = true; break;
          case Op::W: n.slot_a = slot(a.stage, kW); n.is_compute = true; break;
          case Op::R: n.slot_a = slot(a.stage, kR); n.factor_a = a.fraction; n.is_compute = true; break;
          case Op::OVERLAP_F_B:
            n.slot_a = slot(a.stage, kF);
            n.slot_b = slot(a.b_stage, a.b_op == Op::I ? kOI : kOB);
            n.is_compute = true;
            break;
          case Op::OPTIMIZER: n.slot_a = opt_slot_base + r; n.is_compute = true; n.optimizer = true; break;
          default: break;  // posts and issues take no compute-stream time
        }
        mk[i].main = static_cast<std::uint32_t>(tmp.size());
        tmp.push_back(n);
        Node x = n;
        x.is_compute = false;
        x.slot_b = -1;
        x.factor_a = 1;
        bool extra = true;
        switch (a.op) {
          case Op::SEND_F: x.stream = Stream::P2P; x.slot_a = slot(a.stage, kSendF); break;
          case Op::SEND_B: x.stream = Stream::P2P; x.slot_a = slot(a.stage, kSendB); break;
          case Op::REDUCE_GRAD: x.stream = Stream::Collective; x.slot_a = slot(a.stage, kReduce); x.factor_a = a.fraction; break;
          case Op::OFFLOAD: x.stream = Stream::Copy; x.slot_a = slot(a.stage, kOffload); x.copy = true; break;
          case Op::RELOAD: x.stream = Stream::Copy; x.slot_a = slot(a.stage, kReload); x.copy = true; break;
          // The parameter all-gather of a distributed optimizer (zero duration without one).
          case Op::OPTIMIZER: x.stream = Stream::Collective; x.slot_a = opt_slot_base + R + r; x.optimizer = false; break;
          default: extra = false;
        }
        if (extra) {
          mk[i].extra = static_cast<std::uint32_t>(tmp.size());
          tmp.push_back(x);
        }
        if (a.op == Op::SEND_F) xfer_f[static_cast<size_t>(k)][key(a.stage, a.microbatch)] = mk[i].extra;
        if (a.op == Op::SEND_B) xfer_b[static_cast<size_t>(k)][key(a.stage, a.microbatch)] = mk[i].extra;
        if (a.op == Op::RECV_F) post_f[static_cast<size_t>(k)][key(a.stage, a.microbatch)] = mk[i].main;
        if (a.op == Op::RECV_B) post_b[static_cast<size_t>(k)][key(a.stage, a.microbatch)] = mk[i].main;
      }
    }
  }

  // Pass 2: edges.
  std::vector<std::vector<std::uint32_t>> in(tmp.size());
  std::vector<std::vector<std::vector<std::uint32_t>>> reduce_issue(
      static_cast<size_t>(K), std::vector<std::vector<std::uint32_t>>(static_cast<size_t>(s.num_stages))),
      reduce_node = reduce_issue;  // [k][stage]: REDUCE_GRAD issue nodes and collective nodes, in order
  auto edge = [&](std::uint32_t from, std::uint32_t to) {
    if (from != kNone) in[to].push_back(from);
  };
  // A forward waits for the forward input of its (stage, microbatch) received before it; a
  // backward or recompute for the gradient received and the checkpoint reloaded before it.
  enum Wait { kInput = 0, kGrad = 1 };
  auto add_node = [&](const Node& n) {
    tmp.push_back(n);
    in.emplace_back();
    return static_cast<std::uint32_t>(tmp.size() - 1);
  };
  for (int r = 0; r < R; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    const std::vector<bool> deferred = schedules::deferred_reductions(list);
    // schedules::backward_before of every bucket, in one pass (a stage's buckets stand in a
    // row, and a call for each walked back over the ones before it): the last action before it
    // other than a send or a reduction, when that is a backward of the bucket's stage.
    std::vector<int> bwd_before(list.size(), -1);
    for (int i = 0, other = -1; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<size_t>(i)];
      if (a.op == Op::REDUCE_GRAD && other >= 0) {
        const Action& o = list[static_cast<size_t>(other)];
        const bool bwd = ((o.op == Op::B || o.op == Op::W) && o.stage == a.stage) || (o.op == Op::OVERLAP_F_B && o.b_stage == a.stage);
        bwd_before[static_cast<size_t>(i)] = bwd ? other : -1;
      }
      if (a.op != Op::SEND_F && a.op != Op::SEND_B && a.op != Op::REDUCE_GRAD) other = i;
    }
    std::uint32_t prev_compute = kNone, prev_coll = kNone, prev_copy = kNone, pending_gather = kNone;
    for (int k = 0; k < K; ++k) {
      std::vector<std::vector<std::uint32_t>> pending(2 * keys);
      std::map<int, std::uint32_t> deferred_wait;  // stage -> its deferred share's collective node
      auto after_deferred = [&](int st, std::uint32_t node) {
        auto it = deferred_wait.find(st);
        if (it == deferred_wait.end()) return;
        edge(it->second, node);
        deferred_wait.erase(it);
      };
      const auto& mk = made[static_cast<size_t>(k)][static_cast<size_t>(r)];
      auto consume = [&](int st, int mb, Wait w, std::uint32_t node) {
        auto& p = pending[2 * key(st, mb) + w];
        for (std::uint32_t from : p) edge(from, node);
        p.clear();
      };
      auto wait_on = [&](int st, int mb, Wait w, std::uint32_t from) { pending[2 * key(st, mb) + w].push_back(from); };
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        std::uint32_t me = mk[i].main, ex = mk[i].extra;
        if (a.op == Op::REDUCE_GRAD && a.early > 0) {
          // A bucket ready inside the backward: issued from it (its only predecessor, so that
          // evaluate() can start it early); the compute stream does not wait for it.
          edge(mk[static_cast<size_t>(bwd_before[i])].main, me);
          tmp[me].early = a.early;
        } else {
          edge(prev_compute, me);
          prev_compute = me;
        }
        if (tmp[me].is_compute && !tmp[me].optimizer) {
          after_deferred(a.stage, me);
          if (a.op == Op::OVERLAP_F_B) after_deferred(a.b_stage, me);
        }
        switch (a.op) {
          case Op::F: consume(a.stage, a.microbatch, kInput, me); break;
          case Op::B: case Op::I: case Op::R: consume(a.stage, a.microbatch, kGrad, me); break;
          case Op::W: break;
          case Op::OVERLAP_F_B:
            consume(a.stage, a.microbatch, kInput, me);
            consume(a.b_stage, a.b_microbatch, kGrad, me);
            break;
          case Op::RECV_F:
            wait_on(a.stage, a.microbatch, kInput, xfer_f[static_cast<size_t>(k)][key(s.prev_stage(a.stage), a.microbatch)]);
            break;
          case Op::RECV_B:
            wait_on(a.stage, a.microbatch, kGrad, xfer_b[static_cast<size_t>(k)][key(s.next_stage(a.stage), a.microbatch)]);
            break;
          case Op::SEND_F:
            edge(me, ex);
            edge(post_f[static_cast<size_t>(k)][key(s.next_stage(a.stage), a.microbatch)], ex);
            break;
          case Op::SEND_B:
            edge(me, ex);
            edge(post_b[static_cast<size_t>(k)][key(s.prev_stage(a.stage), a.microbatch)], ex);
            break;
          case Op::REDUCE_GRAD:
            edge(me, ex);
            edge(prev_coll, ex);
            prev_coll = ex;
            reduce_issue[static_cast<size_t>(k)][static_cast<size_t>(a.stage)].push_back(me);
            reduce_node[static_cast<size_t>(k)][static_cast<size_t>(a.stage)].push_back(ex);
            if (deferred[i]) deferred_wait[a.stage] = ex;  // the stage's next compute waits for it
            break;
          case Op::OFFLOAD:
            edge(me, ex);
            edge(prev_copy, ex);
            prev_copy = ex;
            break;
          case Op::RELOAD:
            edge(me, ex);
            edge(prev_copy, ex);
            prev_copy = ex;
            wait_on(a.stage, a.microbatch, kGrad, ex);
            break;
          case Op::OPTIMIZER: {
            // Megatron's distributed optimizer gathers the updated parameters inside its step:
            // after the update, on the collective stream. The next iteration computes once the
            // first bucket has arrived (all of it unless the gather overlaps the forward:
            // CostTable::param_gather_head_share), and its first compute ends no earlier than
            // the whole gather (each layer's forward waits for its bucket).
            edge(prev_coll, me);
            edge(me, ex);
            prev_coll = ex;
            Node h = tmp[ex];
            h.slot_a = -1;
            h.head_slot = opt_slot_base + 2 * R + r;
            const std::uint32_t head = add_node(h);
            edge(ex, head);
            prev_compute = head;
            pending_gather = ex;
            break;
          }
          default: break;
        }
        if (pending_gather != kNone && tmp[me].is_compute && !tmp[me].optimizer) {
          Node j = tmp[me];
          j.slot_a = j.slot_b = -1;
          j.is_compute = false;
          const std::uint32_t join = add_node(j);
          edge(me, join);
          edge(pending_gather, join);
          prev_compute = join;
          pending_gather = kNone;
        }
      }
    }
  }
  // Stages holding copies of the same model part (Chimera's two directions) reduce their
  // gradients in one collective: the j-th reduction of each copy starts when every copy has
  // issued its j-th.
  if (s.num_chains > 1)
    for (int k = 0; k < K; ++k)
      for (int part = 0; part < s.stages_per_chain(); ++part)
        for (int c = 0; c < s.num_chains; ++c) {
          int st = c * s.stages_per_chain() + part;
          const auto& mine = reduce_node[static_cast<size_t>(k)][static_cast<size_t>(st)];
          for (int c2 = 0; c2 < s.num_chains; ++c2) {
            if (c2 == c) continue;
            const auto& other = reduce_issue[static_cast<size_t>(k)][static_cast<size_t>(c2 * s.stages_per_chain() + part)];
            for (size_t j = 0; j < mine.size() && j < other.size(); ++j) edge(other[j], mine[j]);
          }
        }

  // Topological order (Kahn); what cannot be ordered is a deadlock.
  std::vector<std::uint32_t> indeg(tmp.size(), 0);
  std::vector<std::vector<std::uint32_t>> out(tmp.size());
  for (std::uint32_t v = 0; v < tmp.size(); ++v)
    for (std::uint32_t u : in[v]) {
      out[u].push_back(v);
      ++indeg[v];
    }
  std::deque<std::uint32_t> ready;
  for (std::uint32_t v = 0; v < tmp.size(); ++v)
    if (indeg[v] == 0) ready.push_back(v);
  std::vector<std::uint32_t> order;
  order.reserve(tmp.size());
  while (!ready.empty()) {
    std::uint32_t u = ready.front();
    ready.pop_front();
    order.push_back(u);
    for (std::uint32_t v : out[u])
      if (--indeg[v] == 0) ready.push_back(v);
  }
  if (order.size() != tmp.size()) {
    // Mark, per rank, the first compute-stream action that never became ready.
    std::vector<int> first_stuck(static_cast<size_t>(R), -1);
    std::vector<bool> sorted(tmp.size(), false);
    for (auto v : order) sorted[v] = true;
    for (std::uint32_t v = 0; v < tmp.size(); ++v) {
      const Node& n = tmp[v];
      if (sorted[v] || n.stream != Stream::Compute || n.iteration != 0) continue;
      int& f = first_stuck[static_cast<size_t>(n.rank)];
      if (f < 0 || n.position < f) f = n.position;
    }
    std::vector<std::pair<int, int>> marks;
    std::string who;
    for (int r = 0; r < R; ++r)
      if (first_stuck[static_cast<size_t>(r)] >= 0) {
        marks.emplace_back(r, first_stuck[static_cast<size_t>(r)]);
        who += " rank " + std::to_string(r) + " at step " + std::to_string(first_stuck[static_cast<size_t>(r)]) + ";";
      }
    schedules::GridOptions g;
    g.marks = marks;
    g.window = 6;
    throw ScheduleError("schedule '" + s.name + "' deadlocks in the evaluator (a transfer waits on a receive posted after "
                        "the compute that waits on it):" + who,
                        schedules::format_grid(s, g));
  }
  std::vector<std::uint32_t> new_id(tmp.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) new_id[order[i]] = i;
  nodes_.resize(tmp.size());
  preds_.clear();
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    Node n = tmp[order[i]];
    n.pred_begin = static_cast<std::uint32_t>(preds_.size());
    for (std::uint32_t u : in[order[i]]) preds_.push_back(new_id[u]);
    n.pred_end = static_cast<std::uint32_t>(preds_.size());
    nodes_[i] = n;
  }

  // Memory and "microbatches held" bookkeeping for the last iteration.
  const int last = K - 1;
  std::vector<double> frac(keys, 0.0);  // recompute fraction of each (stage, microbatch)
  for (const auto& list : s.actions)
    for (const Action& a : list)
      if (a.op == Op::R) frac[key(a.stage, a.microbatch)] = a.fraction;
  std::vector<char> fused(keys, 0);  // (stage, microbatch): its R runs layer by layer inside its B
  for (const auto& list : s.actions)
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].op == Op::R && recompute_fused_with_backward(list, i)) fused[key(list[i].stage, list[i].microbatch)] = 1;
  // A copy moves what the forward kept: scale the stage's offload time (for all activations)
  // by the kept share, known once the cost table gives activation and checkpoint bytes.
  for (Node& n : nodes_)
    if (n.copy) {
      const Action& a = s.actions[static_cast<size_t>(n.rank)][static_cast<size_t>(n.position)];
      n.kept_fraction = frac[key(a.stage, a.microbatch)];
    }
  mem_compute_.assign(static_cast<size_t>(R), {});
  mem_copy_.assign(static_cast<size_t>(R), {});
  held_.assign(static_cast<size_t>(R), {});
  compute_last_.assign(static_cast<size_t>(R), {});
  coll_last_.assign(static_cast<size_t>(R), {});
  for (int r = 0; r < R; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    const auto& mk = made[static_cast<size_t>(last)][static_cast<size_t>(r)];
    auto& mc = mem_compute_[static_cast<size_t>(r)];
    auto& my = mem_copy_[static_cast<size_t>(r)];
    auto& hd = held_[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      std::uint32_t me = new_id[mk[i].main];
      if (tmp[mk[i].main].is_compute) compute_last_[static_cast<size_t>(r)].push_back(me);
      if (a.op == Op::REDUCE_GRAD) coll_last_[static_cast<size_t>(r)].push_back(new_id[mk[i].extra]);
      // The parameter gather that runs into this iteration: the previous iteration's (overlapping
      // this one's first forward when the gather overlaps); with one iteration, its own.
      if (a.op == Op::OPTIMIZER)
        coll_last_[static_cast<size_t>(r)].push_back(new_id[made[static_cast<size_t>(last > 0 ? last - 1 : last)][static_cast<size_t>(r)][i].extra]);
      auto fr = [&](int st, int mb) { return frac[key(st, mb)]; };
      auto working_set = [&](int st) {  // held from the backward's start to its end
        mc.push_back({me, false, st, kWorkStart, 0});
        mc.push_back({me, true, st, kWorkEnd, 0});
      };
      switch (a.op) {
        case Op::F:
          mc.push_back({me, false, a.stage, kAllocF, fr(a.stage, a.microbatch)});
          hd.emplace_back(a.stage, +1);
          break;
        case Op::R: mc.push_back({me, false, a.stage, fused[key(a.stage, a.microbatch)] ? kAllocRLayer : kAllocR, a.fraction}); break;
        case Op::I:
          working_set(a.stage);
          mc.push_back({me, true, a.stage, kFreeI, 0});
          break;
        case Op::W:
          mc.push_back({me, true, a.stage, kFreeW, 0});
          hd.emplace_back(a.stage, -1);
          break;
        case Op::B:
          working_set(a.stage);
          if (fused[key(a.stage, a.microbatch)])
            mc.push_back({me, true, a.stage, kFreeFused, fr(a.stage, a.microbatch)});
          else
            mc.push_back({me, true, a.stage, kFree, 0});
          hd.emplace_back(a.stage, -1);
          break;
        case Op::OVERLAP_F_B:
          mc.push_back({me, false, a.stage, kAllocF, fr(a.stage, a.microbatch)});
          hd.emplace_back(a.stage, +1);
          working_set(a.b_stage);
          if (a.b_op == Op::I) mc.push_back({me, true, a.b_stage, kFreeI, 0});
          if (a.b_op == Op::B) {
            if (fused[key(a.b_stage, a.b_microbatch)])
              mc.push_back({me, true, a.b_stage, kFreeFused, fr(a.b_stage, a.b_microbatch)});
            else
              mc.push_back({me, true, a.b_stage, kFree, 0});
            hd.emplace_back(a.b_stage, -1);
          }
          break;
        case Op::OFFLOAD:
          my.push_back({new_id[mk[i].extra], true, a.stage, kOffloadEnd, fr(a.stage, a.microbatch)});
          hd.emplace_back(a.stage, -1);
          break;
        case Op::RELOAD:
          my.push_back({new_id[mk[i].extra], false, a.stage, kReloadStart, fr(a.stage, a.microbatch)});
          my.push_back({new_id[mk[i].extra], true, a.stage, kReloadEnd, fr(a.stage, a.microbatch)});
          hd.emplace_back(a.stage, +1);
          break;
        default: break;
      }
    }
  }
}

EvalResult Evaluator::evaluate(const CostTable& c) const {
  const Schedule& s = schedule_;
  const int R = s.num_ranks, K = opt_.iterations;
  if (static_cast<int>(c.stages.size()) != s.num_stages || static_cast<int>(c.optimizer_s.size()) != R ||
      static_cast<int>(c.static_bytes.size()) != R)
    throw InputError("evaluator: cost table has " + std::to_string(c.stages.size()) + " stages and " +
                     std::to_string(c.optimizer_s.size()) + " ranks; schedule '" + s.name + "' has " +
                     std::to_string(s.num_stages) + " and " + std::to_string(R));
  // Flatten the costs into slots.
  std::vector<double> slot(static_cast<size_t>(s.num_stages * kSlotsPerStage + 3 * R), 0.0);
  for (int st = 0; st < s.num_stages; ++st) {
    const StageCost& sc = c.stages[static_cast<size_t>(st)];
    double* p = &slot[static_cast<size_t>(st * kSlotsPerStage)];
    p[kF] = sc.f_s; p[kB] = sc.b_s; p[kI] = sc.i_s; p[kW] = sc.w_s; p[kR] = sc.r_s;
    p[kSendF] = sc.send_f_s; p[kSendB] = sc.send_b_s; p[kReduce] = sc.reduce_grad_s; p[kReduceLatency] = sc.reduce_grad_latency_s;
    p[kOffload] = sc.offload_s; p[kReload] = sc.reload_s;
    p[kOB] = overlapped_backward_s(sc, schedules::Op::B); p[kOI] = overlapped_backward_s(sc, schedules::Op::I);
  }
  for (int r = 0; r < R; ++r) slot[static_cast<size_t>(s.num_stages * kSlotsPerStage + r)] = c.optimizer_s[static_cast<size_t>(r)];
  for (int r = 0; r < R && static_cast<int>(c.param_gather_s.size()) == R; ++r)
    slot[static_cast<size_t>(s.num_stages * kSlotsPerStage + R + r)] = c.param_gather_s[static_cast<size_t>(r)];
  for (int r = 0; r < R; ++r)
    slot[static_cast<size_t>(s.num_stages * kSlotsPerStage + 2 * R + r)] =
        static_cast<int>(c.param_gather_head_share.size()) == R ? c.param_gather_head_share[static_cast<size_t>(r)] : 1.0;

  const size_t N = nodes_.size();
  std::vector<double> start(N), end(N);
  std::vector<double> iter_end(static_cast<size_t>(K), 0.0);
  const std::uint32_t* pr = preds_.data();
  for (size_t i = 0; i < N; ++i) {
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
    if (n.slot_a >= 0 && n.slot_a < s.num_stages * kSlotsPerStage && n.slot_a % kSlotsPerStage == kR)  // whole layers
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

  EvalResult res;
  res.iteration_time_s = K >= 2 ? iter_end[static_cast<size_t>(K - 1)] - iter_end[static_cast<size_t>(K - 2)] : iter_end[0];
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

  // Communication stream busy and exposed time in the last iteration.
  res.dp_comm_s.assign(static_cast<size_t>(R), 0.0);
  res.exposed_dp_comm_s.assign(static_cast<size_t>(R), 0.0);
  // Compute nodes of one rank run one after another, so their intervals are already in time
  // order; each reduction's exposed part is its length minus its overlap with them.
  for (int r = 0; r < R; ++r) {
    const auto& busy = compute_last_[static_cast<size_t>(r)];
    for (std::uint32_t c : coll_last_[static_cast<size_t>(r)]) {
      double cs = start[c], ce = end[c];
      double covered = 0;
      auto it = std::lower_bound(busy.begin(), busy.end(), cs, [&](std::uint32_t id, double t) { return end[id] <= t; });
      for (; it != busy.end() && start[*it] < ce; ++it) covered += std::max(0.0, std::min(end[*it], ce) - std::max(start[*it], cs));
      res.dp_comm_s[static_cast<size_t>(r)] += ce - cs;
      res.exposed_dp_comm_s[static_cast<size_t>(r)] += (ce - cs) - covered;
    }
  }

  // Microbatches held, in list order, weighted by stage size.
  res.peak_activations.assign(static_cast<size_t>(R), 0.0);
  for (int r = 0; r < R; ++r) {
    double cur = 0, peak = 0;
    for (auto [st, d] : held_[static_cast<size_t>(r)]) {
      cur += d * c.stages[static_cast<size_t>(st)].weight;
      peak = std::max(peak, cur);
    }
    res.peak_activations[static_cast<size_t>(r)] = peak;
  }

  res.peak_activation_bytes.assign(static_cast<size_t>(R), 0.0);
  res.peak_host_bytes.assign(static_cast<size_t>(R), 0.0);
  res.peak_memory_bytes.assign(static_cast<size_t>(R), 0.0);
  if (opt_.memory && opt_.record) res.memory_timeline.assign(static_cast<size_t>(R), {});
  if (opt_.memory) {
    for (int r = 0; r < R; ++r) {
      const auto& a = mem_compute_[static_cast<size_t>(r)];
      const auto& b = mem_copy_[static_cast<size_t>(r)];
      auto time_of = [&](const MemOp& op) { return op.at_end ? end[op.node] : start[op.node]; };
      auto delta = [&](const MemOp& op, double& gpu, double& host) {
        const StageCost& sc = c.stages[static_cast<size_t>(op.stage)];
        const double stored = kept_activation_bytes(sc, op.fraction);
        switch (op.what) {
          case kAllocF: gpu += stored; break;
          case kAllocR: gpu += recompute_activation_bytes(sc, op.fraction, false); break;
          case kAllocRLayer: gpu += recompute_activation_bytes(sc, op.fraction, true); break;
          case kFree: gpu -= backward_freed_bytes(sc, op.fraction, false); break;
          case kFreeFused: gpu -= backward_freed_bytes(sc, op.fraction, true); break;
          case kFreeI: gpu -= split_input_freed_bytes(sc); break;
          case kFreeW: gpu -= split_weight_freed_bytes(sc); break;
          case kOffloadEnd: gpu -= stored; host += stored; break;
          case kReloadStart: gpu += stored; break;
          case kReloadEnd: host -= stored; break;
          case kWorkStart: gpu += sc.work_bytes; break;
          case kWorkEnd: gpu -= sc.work_bytes; break;
        }
      };
      auto frees = [](const MemOp& op) {
        return op.what == kFree || op.what == kFreeFused || op.what == kFreeI || op.what == kFreeW || op.what == kOffloadEnd ||
               op.what == kReloadEnd || op.what == kWorkEnd;
      };
      double gpu = 0, host = 0, peak_gpu = 0, peak_host = 0;
      size_t i = 0, j = 0;
      while (i < a.size() || j < b.size()) {
        bool take_a;
        if (j >= b.size()) take_a = true;
        else if (i >= a.size()) take_a = false;
        else {
          double ta = time_of(a[i]), tb = time_of(b[j]);
          take_a = ta < tb || (ta == tb && (frees(a[i]) || !frees(b[j])));
        }
        const MemOp& op = take_a ? a[i++] : b[j++];
        delta(op, gpu, host);
        if (opt_.record) res.memory_timeline[static_cast<size_t>(r)].push_back({time_of(op), c.static_bytes[static_cast<size_t>(r)] + gpu});
        peak_gpu = std::max(peak_gpu, gpu);
        peak_host = std::max(peak_host, host);
      }
      res.peak_activation_bytes[static_cast<size_t>(r)] = peak_gpu;
      res.peak_host_bytes[static_cast<size_t>(r)] = peak_host;
      res.peak_memory_bytes[static_cast<size_t>(r)] = c.static_bytes[static_cast<size_t>(r)] + peak_gpu;
    }
  }

  if (opt_.record) {
    res.spans.reserve(N);
    for (size_t i = 0; i < N; ++i) {
      const Node& n = nodes_[i];
      if (n.stream == Stream::Compute && !n.is_compute) continue;  // posts and issues
      if (n.slot_a < 0 && n.slot_b < 0 && !n.is_compute) continue;  // a gather's first bucket or its join: no work
      const bool gather = n.stream == Stream::Collective && n.slot_a >= s.num_stages * kSlotsPerStage;
      if (gather && end[i] == start[i]) continue;  // no distributed optimizer: no parameter all-gather
      res.spans.push_back({n.rank, n.stream, n.iteration, n.position, start[i], end[i]});
    }
  }
  return res;
}

}  // namespace stagecraft::costmodel
