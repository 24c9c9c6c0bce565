// The evaluator's compilation: a lowered schedule into a dependency graph of nodes in
// topological order (evaluator.h states the waits). Pass 1 makes the nodes, pass 2 the edges,
// then the nodes are ordered (what cannot be ordered is a deadlock) and the last iteration's
// compute, collective and memory bookkeeping recorded.
#include <limits>
#include <map>

#include "costmodel/evaluator.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/grid.h"

namespace stagecraft::costmodel {

using schedules::Action;
using schedules::Op;
using schedules::Schedule;

namespace {
constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
}  // namespace

struct Evaluator::Build {
  struct Made { std::uint32_t main = kNone, extra = kNone; };  // an action's nodes
  using PerKey = std::vector<std::vector<std::uint32_t>>;      // [iteration][stage * m + mb]
  // A forward waits for the forward input of its (stage, microbatch) received before it; a
  // backward or recompute for the gradient received and the checkpoint reloaded before it.
  enum Wait { kInput = 0, kGrad = 1 };
  // One rank's walk over its list, across iterations (pass 2).
  struct Walk {
    std::uint32_t prev_compute = kNone, prev_coll = kNone, prev_copy = kNone, pending_gather = kNone;
    std::vector<std::vector<std::uint32_t>> pending;  // [2 * key + Wait]: transfers the next consumer waits for
    std::map<int, std::uint32_t> deferred_wait;       // stage -> its deferred share's collective node
    std::vector<bool> deferred;                        // per position: a deferred reduction (buckets.h)
    std::vector<int> backward_before;                  // per position: a bucket's backward (buckets.h)
  };

  const Schedule& s;
  const int K, m, R;
  const size_t keys;
  const std::int32_t opt_slot_base;
  std::vector<Node> tmp;                               // nodes in creation order
  std::vector<std::uint32_t> edge_from, edge_to;       // the edges, in the order they were made
  std::vector<std::vector<std::vector<Made>>> made;    // [k][rank][pos]
  PerKey xfer_f, xfer_b, post_f, post_b;               // SEND transfer nodes and RECV posts
  std::vector<std::vector<std::vector<std::uint32_t>>> reduce_issue, reduce_node;  // [k][stage], in order
  std::vector<std::uint32_t> new_id;                   // creation index -> topological index

  Build(const Schedule& sched, int iterations)
      : s(sched), K(iterations), m(sched.num_microbatches), R(sched.num_ranks),
        keys(static_cast<size_t>(sched.num_stages) * sched.num_microbatches), opt_slot_base(sched.num_stages * kSlotsPerStage) {}

  size_t key(int st, int mb) const { return static_cast<size_t>(st) * m + mb; }
  static std::int32_t slot(int st, Slot sl) { return st * kSlotsPerStage + sl; }
  void edge(std::uint32_t from, std::uint32_t to) {
    if (from == kNone) return;
    edge_from.push_back(from);
    edge_to.push_back(to);
  }
  std::uint32_t add_node(const Node& n) {
    tmp.push_back(n);
    return static_cast<std::uint32_t>(tmp.size() - 1);
  }

  // Pass 1.
  void create_nodes();
  Node main_node(const Action& a, int r, int k, int i) const;
  bool extra_node(const Action& a, int r, Node& x) const;
  // Pass 2.
  void add_edges();
  void walk_action(Walk& w, int r, int k, size_t i);
  void wait_edges(Walk& w, const Action& a, int k, std::uint32_t me);
  void stream_edges(Walk& w, const Action& a, int k, size_t i, std::uint32_t me, std::uint32_t ex);
  void optimizer_edges(Walk& w, int r, std::uint32_t me, std::uint32_t ex);
  void join_chain_reductions();
  // Ordering. Adjacency as one flat array per direction (CSR): node v's entries are
  // items[begin[v], begin[v + 1]).
  struct Adjacency { std::vector<std::uint32_t> begin, items; };
  Adjacency predecessors() const;  // each node's, in the order the edges were made
  std::vector<std::uint32_t> topological_order(const Adjacency& in) const;
  [[noreturn]] void throw_deadlock(const std::vector<std::uint32_t>& order) const;
};

Evaluator::Node Evaluator::Build::main_node(const Action& a, int r, int k, int i) const {
  Node n;
  n.rank = r;
  n.position = i;
  n.iteration = k;
  n.stream = Stream::Compute;
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
  return n;
}

// The node of the work an action issues on another stream, if any (x starts as its main node).
bool Evaluator::Build::extra_node(const Action& a, int r, Node& x) const {
  x.is_compute = false;
  x.slot_b = -1;
  x.factor_a = 1;
  switch (a.op) {
    case Op::SEND_F: x.stream = Stream::P2P; x.slot_a = slot(a.stage, kSendF); return true;
    case Op::SEND_B: x.stream = Stream::P2P; x.slot_a = slot(a.stage, kSendB); return true;
    case Op::REDUCE_GRAD: x.stream = Stream::Collective; x.slot_a = slot(a.stage, kReduce); x.factor_a = a.fraction; return true;
    case Op::OFFLOAD: x.stream = Stream::Copy; x.slot_a = slot(a.stage, kOffload); x.copy = true; return true;
    case Op::RELOAD: x.stream = Stream::Copy; x.slot_a = slot(a.stage, kReload); x.copy = true; return true;
    // The parameter all-gather of a distributed optimizer (zero duration without one).
    case Op::OPTIMIZER: x.stream = Stream::Collective; x.slot_a = opt_slot_base + R + r; x.optimizer = false; return true;
    default: return false;
  }
}

// Pass 1: nodes in creation order (rank, iteration, position), and where sends and receive
// posts are.
void Evaluator::Build::create_nodes() {
  made.assign(static_cast<size_t>(K), std::vector<std::vector<Made>>(static_cast<size_t>(R)));
  xfer_f.assign(static_cast<size_t>(K), std::vector<std::uint32_t>(keys, kNone));
  xfer_b = post_f = post_b = xfer_f;
  tmp.reserve(static_cast<size_t>(2 * K) * s.total_actions());
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      auto& mk = made[static_cast<size_t>(k)][static_cast<size_t>(r)];
      mk.resize(list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const Node n = main_node(a, r, k, static_cast<int>(i));
        mk[i].main = static_cast<std::uint32_t>(tmp.size());
        tmp.push_back(n);
        Node x = n;
        if (extra_node(a, r, x)) {
          mk[i].extra = static_cast<std::uint32_t>(tmp.size());
          tmp.push_back(x);
        }
        const size_t kk = static_cast<size_t>(k);
        if (a.op == Op::SEND_F) xfer_f[kk][key(a.stage, a.microbatch)] = mk[i].extra;
        if (a.op == Op::SEND_B) xfer_b[kk][key(a.stage, a.microbatch)] = mk[i].extra;
        if (a.op == Op::RECV_F) post_f[kk][key(a.stage, a.microbatch)] = mk[i].main;
        if (a.op == Op::RECV_B) post_b[kk][key(a.stage, a.microbatch)] = mk[i].main;
      }
    }
  edge_from.reserve(2 * tmp.size());
  edge_to.reserve(2 * tmp.size());
}

// Pass 2: edges, rank by rank.
void Evaluator::Build::add_edges() {
  reduce_issue.assign(static_cast<size_t>(K), std::vector<std::vector<std::uint32_t>>(static_cast<size_t>(s.num_stages)));
  reduce_node = reduce_issue;
  for (int r = 0; r < R; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    Walk w;
    w.deferred = schedules::deferred_reductions(list);
    w.backward_before = schedules::backwards_before(list);
    for (int k = 0; k < K; ++k) {
      w.pending.assign(2 * keys, {});
      w.deferred_wait.clear();
      for (size_t i = 0; i < list.size(); ++i) walk_action(w, r, k, i);
    }
  }
  join_chain_reductions();
}

void Evaluator::Build::walk_action(Walk& w, int r, int k, size_t i) {
  const Action& a = s.actions[static_cast<size_t>(r)][i];
  const auto& mk = made[static_cast<size_t>(k)][static_cast<size_t>(r)];
  const std::uint32_t me = mk[i].main, ex = mk[i].extra;
  if (a.op == Op::REDUCE_GRAD && a.early > 0) {
    // A bucket ready inside the backward: issued from it (its only predecessor, so that
    // evaluate() can start it early); the compute stream does not wait for it.
    edge(mk[static_cast<size_t>(w.backward_before[i])].main, me);
    tmp[me].early = a.early;
  } else {
    edge(w.prev_compute, me);
    w.prev_compute = me;
  }
  const bool computes = tmp[me].is_compute && !tmp[me].optimizer;
  auto after_deferred = [&](int st) {  // a stage's next compute waits for its deferred share
    auto it = w.deferred_wait.find(st);
    if (it == w.deferred_wait.end()) return;
    edge(it->second, me);
    w.deferred_wait.erase(it);
  };
  if (computes) {
    after_deferred(a.stage);
    if (a.op == Op::OVERLAP_F_B) after_deferred(a.b_stage);
  }
  wait_edges(w, a, k, me);
  stream_edges(w, a, k, i, me, ex);
  if (a.op == Op::OPTIMIZER) optimizer_edges(w, r, me, ex);
  if (w.pending_gather != kNone && computes) {  // the first compute after a parameter gather
    Node j = tmp[me];
    j.slot_a = j.slot_b = -1;
    j.is_compute = false;
    const std::uint32_t join = add_node(j);
    edge(me, join);
    edge(w.pending_gather, join);
    w.prev_compute = join;
    w.pending_gather = kNone;
  }
}

// What a compute waits for: the transfers and reloads of its (stage, microbatch) posted before it.
void Evaluator::Build::wait_edges(Walk& w, const Action& a, int k, std::uint32_t me) {
  auto consume = [&](int st, int mb, Wait wt) {
    auto& p = w.pending[2 * key(st, mb) + wt];
    for (std::uint32_t from : p) edge(from, me);
    p.clear();
  };
  auto wait_on = [&](int st, int mb, Wait wt, std::uint32_t from) { w.pending[2 * key(st, mb) + wt].push_back(from); };
  const size_t kk = static_cast<size_t>(k);
  switch (a.op) {
    case Op::F: consume(a.stage, a.microbatch, kInput); break;
    case Op::B: case Op::I: case Op::R: consume(a.stage, a.microbatch, kGrad); break;
    case Op::OVERLAP_F_B:
      consume(a.stage, a.microbatch, kInput);
      consume(a.b_stage, a.b_microbatch, kGrad);
      break;
    case Op::RECV_F: wait_on(a.stage, a.microbatch, kInput, xfer_f[kk][key(s.prev_stage(a.stage), a.microbatch)]); break;
    case Op::RECV_B: wait_on(a.stage, a.microbatch, kGrad, xfer_b[kk][key(s.next_stage(a.stage), a.microbatch)]); break;
    default: break;
  }
}

// The work an action issues on the other streams: transfers after both ends are posted,
// reductions and copies in issue order on their streams (a RELOAD also feeds its consumer).
void Evaluator::Build::stream_edges(Walk& w, const Action& a, int k, size_t i, std::uint32_t me, std::uint32_t ex) {
  const size_t kk = static_cast<size_t>(k);
  switch (a.op) {
    case Op::SEND_F: edge(me, ex); edge(post_f[kk][key(s.next_stage(a.stage), a.microbatch)], ex); break;
    case Op::SEND_B: edge(me, ex); edge(post_b[kk][key(s.prev_stage(a.stage), a.microbatch)], ex); break;
    case Op::REDUCE_GRAD:
      edge(me, ex);
      edge(w.prev_coll, ex);
      w.prev_coll = ex;
      reduce_issue[kk][static_cast<size_t>(a.stage)].push_back(me);
      reduce_node[kk][static_cast<size_t>(a.stage)].push_back(ex);
      if (w.deferred[i]) w.deferred_wait[a.stage] = ex;  // the stage's next compute waits for it
      break;
    case Op::OFFLOAD: case Op::RELOAD:
      edge(me, ex);
      edge(w.prev_copy, ex);
      w.prev_copy = ex;
      if (a.op == Op::RELOAD) w.pending[2 * key(a.stage, a.microbatch) + kGrad].push_back(ex);
      break;
    default: break;
  }
}

// Megatron's distributed optimizer gathers the updated parameters inside its step: after the
// update, on the collective stream. The next iteration computes once the first bucket has
// arrived (all of it unless the gather overlaps the forward: CostTable::param_gather_head_share),
// and its first compute ends no earlier than the whole gather (each layer's forward waits for
// its bucket).
void Evaluator::Build::optimizer_edges(Walk& w, int r, std::uint32_t me, std::uint32_t ex) {
  edge(w.prev_coll, me);
  edge(me, ex);
  w.prev_coll = ex;
  Node h = tmp[ex];
  h.slot_a = -1;
  h.head_slot = opt_slot_base + 2 * R + r;
  const std::uint32_t head = add_node(h);
  edge(ex, head);
  w.prev_compute = head;
  w.pending_gather = ex;
}

// Stages holding copies of the same model part (Chimera's two directions) reduce their
// gradients in one collective: the j-th reduction of each copy starts when every copy has
// issued its j-th.
void Evaluator::Build::join_chain_reductions() {
  if (s.num_chains < 2) return;
  const int per = s.stages_per_chain();
  for (int k = 0; k < K; ++k)
    for (int part = 0; part < per; ++part)
      for (int c = 0; c < s.num_chains; ++c) {
        const auto& mine = reduce_node[static_cast<size_t>(k)][static_cast<size_t>(c * per + part)];
        for (int c2 = 0; c2 < s.num_chains; ++c2) {
          if (c2 == c) continue;
          const auto& other = reduce_issue[static_cast<size_t>(k)][static_cast<size_t>(c2 * per + part)];
          for (size_t j = 0; j < mine.size() && j < other.size(); ++j) edge(other[j], mine[j]);
        }
      }
}

Evaluator::Build::Adjacency Evaluator::Build::predecessors() const {
  Adjacency in;
  in.begin.assign(tmp.size() + 1, 0);
  for (std::uint32_t to : edge_to) ++in.begin[to + 1];
  for (size_t v = 0; v < tmp.size(); ++v) in.begin[v + 1] += in.begin[v];
  in.items.resize(edge_to.size());
  std::vector<std::uint32_t> fill(in.begin.begin(), in.begin.end() - 1);
  for (size_t e = 0; e < edge_to.size(); ++e) in.items[fill[edge_to[e]]++] = edge_from[e];
  return in;
}

// Kahn's order, first-in first-out, each node's successors in increasing order; throws on what
// cannot be ordered.
std::vector<std::uint32_t> Evaluator::Build::topological_order(const Adjacency& in) const {
  const size_t n = tmp.size();
  Adjacency out;
  out.begin.assign(n + 1, 0);
  for (std::uint32_t u : in.items) ++out.begin[u + 1];
  for (size_t v = 0; v < n; ++v) out.begin[v + 1] += out.begin[v];
  out.items.resize(in.items.size());
  std::vector<std::uint32_t> fill(out.begin.begin(), out.begin.end() - 1), indeg(n);
  for (std::uint32_t v = 0; v < n; ++v) {
    indeg[v] = in.begin[v + 1] - in.begin[v];
    for (std::uint32_t j = in.begin[v]; j < in.begin[v + 1]; ++j) out.items[fill[in.items[j]]++] = v;
  }
  std::vector<std::uint32_t> order;  // doubles as the queue: order[head..] are ready
  order.reserve(n);
  for (std::uint32_t v = 0; v < n; ++v)
    if (indeg[v] == 0) order.push_back(v);
  for (size_t head = 0; head < order.size(); ++head) {
    const std::uint32_t u = order[head];
    for (std::uint32_t j = out.begin[u]; j < out.begin[u + 1]; ++j)
      if (--indeg[out.items[j]] == 0) order.push_back(out.items[j]);
  }
  if (order.size() != n) throw_deadlock(order);
  return order;
}

// Marks, per rank, the first compute-stream action that never became ready.
void Evaluator::Build::throw_deadlock(const std::vector<std::uint32_t>& order) const {
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

void Evaluator::compile() {
  Build b(schedule_, opt_.iterations);
  b.create_nodes();
  b.add_edges();
  const Build::Adjacency in = b.predecessors();
  const std::vector<std::uint32_t> order = b.topological_order(in);
  b.new_id.resize(b.tmp.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) b.new_id[order[i]] = i;
  nodes_.resize(b.tmp.size());
  preds_.clear();
  preds_.reserve(in.items.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    Node n = b.tmp[order[i]];
    n.pred_begin = static_cast<std::uint32_t>(preds_.size());
    for (std::uint32_t j = in.begin[order[i]]; j < in.begin[order[i] + 1]; ++j) preds_.push_back(b.new_id[in.items[j]]);
    n.pred_end = static_cast<std::uint32_t>(preds_.size());
    nodes_[i] = n;
  }
  record_last_iteration(b);
}

// The last iteration's compute and collective nodes per rank, its memory events with the nodes
// that time them, and each copy's kept share (a copy moves what the forward kept: the stage's
// offload time, for all activations, scaled once the cost table gives the bytes).
void Evaluator::record_last_iteration(const Build& b) {
  const Schedule& s = schedule_;
  const int R = s.num_ranks, last = opt_.iterations - 1;
  mem_all_ = schedules::memory_events(s);
  mem_compute_.assign(static_cast<size_t>(R), {});
  mem_copy_.assign(static_cast<size_t>(R), {});
  mem_compute_node_.assign(static_cast<size_t>(R), {});
  mem_copy_node_.assign(static_cast<size_t>(R), {});
  compute_last_.assign(static_cast<size_t>(R), {});
  coll_last_.assign(static_cast<size_t>(R), {});
  std::vector<std::vector<double>> kept(static_cast<size_t>(R));  // (ranks) per position: a copy's recompute share
  for (int r = 0; r < R; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    const auto& mk = b.made[static_cast<size_t>(last)][static_cast<size_t>(r)];
    kept[static_cast<size_t>(r)].assign(list.size(), 0.0);
    for (const schedules::MemoryEvent& e : mem_all_[static_cast<size_t>(r)]) {
      const auto& made = mk[static_cast<size_t>(e.position)];
      (e.copy ? mem_copy_ : mem_compute_)[static_cast<size_t>(r)].push_back(e);
      (e.copy ? mem_copy_node_ : mem_compute_node_)[static_cast<size_t>(r)].push_back(b.new_id[e.copy ? made.extra : made.main]);
      if (e.copy) kept[static_cast<size_t>(r)][static_cast<size_t>(e.position)] = e.fraction;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (b.tmp[mk[i].main].is_compute) compute_last_[static_cast<size_t>(r)].push_back(b.new_id[mk[i].main]);
      if (list[i].op == Op::REDUCE_GRAD) coll_last_[static_cast<size_t>(r)].push_back(b.new_id[mk[i].extra]);
      // The parameter gather that runs into this iteration: the previous iteration's
      // (overlapping this one's first forward when the gather overlaps); with one iteration, its own.
      if (list[i].op == Op::OPTIMIZER)
        coll_last_[static_cast<size_t>(r)].push_back(
            b.new_id[b.made[static_cast<size_t>(last > 0 ? last - 1 : last)][static_cast<size_t>(r)][i].extra]);
    }
  }
  for (Node& n : nodes_)
    if (n.copy) n.kept_fraction = kept[static_cast<size_t>(n.rank)][static_cast<size_t>(n.position)];
}

}  // namespace stagecraft::costmodel
