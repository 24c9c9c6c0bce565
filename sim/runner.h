// The simulator's graph builder and engine driver, shared by its two source files (internal to
// sim/): executor.cpp makes the transfers, data-parallel rings and host copies and runs the
// engine; compute.cpp makes the compute actions, with their tensor-parallel collectives when
// those are explicit (one aggregated ring after the action, or the action's inner schedule:
// schedules/tp_overlap.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "costmodel/inner.h"
#include "costmodel/overlapped_pair.h"
#include "sim/executor.h"

namespace stagecraft::sim::detail {

namespace sg = simgrid::s4u;
using Act = std::int32_t;  // node id = record index; -1 = none
constexpr Act kNone = -1;

// Share of its host's speed a latency pad (RecKind::TpPad) runs at: bounded that low, a pad
// that overlaps a compute piece on the same host takes nothing measurable from it (1e-6 of
// the host), and still lasts exactly its seconds.
constexpr double kPadShare = 1e-6;

// Activities that must all finish: what a later activity depends on. `chain_only` marks sets
// made only of compute-stream activities of one unit (ordered, so the latest dominates).
struct Done {
  std::vector<Act> acts;
  bool chain_only = true;
};

inline std::int64_t pos_key(schedules::Op op, int stage, int mb) {
  return (static_cast<std::int64_t>(op) << 40) | (static_cast<std::int64_t>(stage) << 20) | (mb + 1);
}

// One inner schedule a compute action runs (an OVERLAP_F_B runs two, one after the other).
struct InnerPart {
  int stage = 0;                 // the stage whose layers it runs
  costmodel::InnerCosts costs;   // the stage's piece costs (layers = those an R recomputes)
  schedules::Op op = schedules::Op::F;  // F, B, I or R
  int recompute_layers = 0;      // B or I in a cross-pass mode: recomputation joined to it
};

class Runner {
 public:
  Runner(const schedules::Schedule& s, const costmodel::CostTable& c, const Workload& w, const costmodel::ParallelPlan& p,
         int dp_whole, const costmodel::Topology& topo, const Platform& pf, const SimOptions& opt, const UnitEffects& fx)
      : s_(s), c_(c), w_(w), topo_(topo), pf_(pf), opt_(opt), fx_(fx), K_(opt.iterations), dp_(p.dp), tp_(p.tp),
        U_(s.num_ranks * p.dp), dp_whole_(dp_whole), preempt_(p.preemptive_comm) {}

  Execution run();

 private:
  const schedules::Schedule& s_;
  const costmodel::CostTable& c_;
  const Workload& w_;
  const costmodel::Topology& topo_;
  const Platform& pf_;
  SimOptions opt_;
  const UnitEffects& fx_;                                // the what-if on the units (executor.h)
  int K_, dp_, tp_, U_;
  int dp_whole_ = 1;                                     // the plan's replicas, of which dp_ are simulated (symmetry.h)
  // Members (or nodes) of a whole group whose simulated part has m: m x dp_whole_ / dp_ (exact:
  // the simulated replicas are whole blocks, and every block spans its groups alike).
  int whole(int m) const { return static_cast<int>(static_cast<long long>(m) * dp_whole_ / dp_); }
  // What-if: per unit its jitter draws, the compute action (iteration, position) drawn last and its multiplier.
  std::vector<JitterDraws> draws_;
  std::vector<std::pair<int, int>> drawn_at_;
  std::vector<double> drawn_;
  bool preempt_ = false;                                 // plan.preemptive_comm
  Execution ex_;
  // Preemptive communication (FOLD3D Sec. V-A): inter-node pipeline flows in flight per node,
  // sending and receiving; inter-node data-parallel flows in flight; those suspended.
  std::vector<int> pp_sending_, pp_receiving_;           // (nodes)
  std::vector<Act> dp_live_;                             // inter-node dp flows started, not finished
  std::vector<char> suspended_;                          // (records) a dp flow held by a pipeline flow
  std::vector<std::pair<Act, Act>> edges_;               // (predecessor, successor)
  std::vector<std::int32_t> succ_begin_, succ_;          // successors, CSR over edges_
  std::vector<std::int32_t> waiting_;                    // per node: predecessors not finished
  std::vector<sg::ActivityPtr> live_;                    // SimGrid activity once started, until finished
  std::vector<Act> finished_;                            // finished, to release at the next completion
  std::vector<std::vector<std::vector<Act>>> post_;      // [k][unit][pos] last compute-stream activity before pos
  std::vector<std::vector<std::vector<Act>>> compute_;   // [k][unit][pos] the (first) exec of a compute action
  std::vector<std::unordered_map<std::int64_t, int>> pos_of_;  // (ranks) (op, stage, mb) -> position
  std::map<std::tuple<int, int, int, int, int>, Done> transfers_;  // (k, dir, consumer stage, mb, d)
  std::map<std::tuple<int, int, int>, std::vector<Done>> rings_;   // (k, rank, pos) -> done of each dp member
  std::map<std::tuple<int, int, int, bool>, std::vector<Done>> gathers_; // (k, rank, pos, tail) -> parameter all-gathers
  std::map<std::pair<int, int>, std::vector<std::pair<double, int>>> bucket_cuts_;  // (rank, backward pos) ->
                                              // (early, REDUCE_GRAD pos) of the buckets it makes ready
  std::map<std::tuple<int, int, int>, Act> bucket_ready_;  // (k, unit, REDUCE_GRAD pos) -> its issue
  Act first_piece_ = kNone;                   // split_backward's first piece
  std::vector<std::vector<Act>> gather_end_;  // [k][unit] zero-length end of the parameter all-gather's
                                             // first bucket (all of it unless the gather overlaps)
  std::vector<std::vector<Act>> gather_tail_;  // [k][unit] zero-length join after the next iteration's
                                               // first compute and the gather's remaining buckets; kNone
                                               // without overlap (or in the last iteration)
                                              // after the optimizer step (kNone without one)
  std::set<std::tuple<int, int, int>> rings_building_;    // rings whose predecessors are being made
  std::vector<std::vector<int>> reduce_pos_;              // (ranks) positions of REDUCE_GRAD, in order
  std::map<std::pair<int, int>, double> r_fraction_;      // (stage, microbatch) -> its R action's fraction

  int rank_of_unit(int u) const { return u / dp_; }
  int gpu(int u, int t) const { return topo_.global_rank({t, u % dp_, u / dp_}); }
  int lanes() const { return pf_.lanes; }  // tp lanes one flow stands for
  int flows_per_group() const { return tp_ / pf_.lanes; }

  void add_edge(Act pred, Act succ) {
    if (pred != kNone && pred != succ) edges_.emplace_back(pred, succ);
  }
  void add_edges(const Done& d, Act succ) {
    for (Act a : d.acts) add_edge(a, succ);
  }
  Act add(Record r) {
    ex_.records.push_back(r);
    return static_cast<Act>(ex_.records.size() - 1);
  }
  // An exec of `seconds` on the unit's host; a TpPad runs bounded at kPadShare of the host.
  Act exec(int u, int k, int pos, double seconds, RecKind kind) { return add(exec_record(u, k, pos, perturbed(u, k, pos, seconds, kind), kind)); }
  // A compute exec's seconds under the what-if: over the unit's rate, times its action's draw.
  double perturbed(int u, int k, int pos, double seconds, RecKind kind);
  Act late_start(int u);
  Record exec_record(int u, int k, int pos, double seconds, RecKind kind) const {
    const size_t g = static_cast<size_t>(gpu(u, 0));
    sg::Host* h = pf_.compute.empty() ? pf_.gpus[g] : pf_.compute[g];
    Record r;
    r.unit = r.peer_unit = u;
    r.iteration = k;
    r.position = pos;
    r.src_gpu = r.dst_gpu = gpu(u, 0);
    r.kind = kind;
    r.from = h;
    r.work = std::max(0.0, seconds) * h->get_speed() * (kind == RecKind::TpPad ? kPadShare : 1.0);
    return r;
  }
  // One flow of `bytes` per GPU lane: lanes() lanes aggregated into one flow of lanes x bytes.
  Act flow(sg::Host* from, sg::Host* to, double bytes, Record r) {
    r.kind = RecKind::Flow;
    r.lanes = lanes();
    r.bytes = std::max(0.0, bytes) * lanes();
    r.work = r.bytes;
    r.from = from;
    r.to = to;
    return add(r);
  }
  void link_graph();
  void launch(Act id);
  void on_done(const sg::Activity& a);
  // Preemption: which node a flow leaves and enters (-1: host memory or one node); whether a
  // dp flow must wait for a pipeline flow; suspend or resume dp flows as pipeline flows come and go.
  std::pair<int, int> nodes_of(const Record& r) const;
  bool held(const Record& dp_flow) const;
  void preempt_on_start(Act id);
  void preempt_on_end(Act id);

  // Share of a stage's activations one copy moves: what the forward kept over all of them
  // (costmodel::kept_activation_bytes, recomputation by whole layers), f its recompute share.
  double kept_share(const schedules::Action& a) const {
    const auto& sc = c_.stages[static_cast<size_t>(a.stage)];
    double f = 0;
    for (const schedules::Action& x : s_.actions[static_cast<size_t>(s_.rank_of(a.stage))])
      if (x.op == schedules::Op::R && x.stage == a.stage && x.microbatch == a.microbatch) f = x.fraction;
    return sc.act_bytes > 0 ? costmodel::kept_activation_bytes(sc, f) / sc.act_bytes : 1.0;
  }

  // compute.cpp: compute actions and their explicit tensor-parallel collectives.
  double duration(const schedules::Action& a, int rank, double* tp_s, double* tp_count) const;
  void build_chains();
  Act compute_action(int u, int k, int pos, Act prev, Act* first);
  Act tp_collectives(int u, int k, int pos, int stage, const std::vector<Act>& after, double count);
  bool runs_inner(const schedules::Action& a) const;
  std::vector<InnerPart> inner_parts(const schedules::Action& a) const;
  InnerPart inner_part(int stage, schedules::Op op, int microbatch) const;
  Act inner_action(int u, int k, int pos, Act prev, const std::vector<InnerPart>& parts, Act* first);
  Record tp_flow(int u, int k, int pos, int stage, int j, double count) const;
  // Expert parallelism: an action's all-to-alls (`count` of them) after `after`, as flows between
  // every two members of the unit's ep group once every member has reached them (rendezvous),
  // then a pad with the latencies the flows do not carry (compute.cpp). Returns the pad.
  double exchange_share(const schedules::Action& a, const std::vector<double>& f, const std::vector<double>& b) const;
  double all_to_all_count(const schedules::Action& a) const;
  // `exchange`: the group key's kind (0; an overlapped pair's backward half 2).
  Act all_to_alls(int u, int k, int pos, int stage, Act after, double count, int exchange = 0);
  // DualPipe's overlapped pair with experts (exchange.cpp): its halves' all-to-alls as flows beside
  // its compute, the compute timed by the cost model's rule (costmodel/overlapped_pair.h).
  bool pair_runs_all_to_alls(const schedules::Action& a) const;
  costmodel::OverlappedPair pair_costs(const schedules::Action& a) const;
  Act pair_all_to_alls(int u, int k, int pos, const schedules::Action& a, Act start, Act compute_end,
                       const costmodel::OverlappedPair& pc);
  // Context parallelism's ring (exchange.cpp): an action's key/value exchanges with the next cp
  // rank as one flow beside its compute, from `start`; returns the join of the compute exec
  // `compute` and the ring.
  double cp_ring_bytes(const schedules::Action& a) const;
  Act cp_ring(int u, int k, int pos, double bytes, Act start, Act compute);
  // Flows among the members of a group (exchange.cpp) once every one has reached its `after`:
  // `bytes(from, to)` per ordered pair of units (0: none); each member's `done` waits for its
  // flows both ways and its own `after`.
  struct GroupMember {
    int unit;
    Act after, done;
  };
  using GroupKey = std::tuple<int, int, int, int, int>;  // (kind, k, rank, pos, group); kind 0 all-to-alls
                                                         // (a pair's forward half), 1 cp ring, 2 a pair's backward half
  void group_exchange(const GroupKey& key, int size, const GroupMember& m, CommKind kind,
                      const std::function<double(int, int)>& bytes);
  std::map<GroupKey, std::vector<GroupMember>> groups_;
  double tp_pad_s(double count) const;
  // Collapsed inner schedules (SimOptions::symmetry, where inner_isolated): one exec per action
  // of its parts' two-stream time (costmodel::evaluate_inner with the flows' isolated times),
  // expanded into the records the full simulation makes once the engine has run.
  struct InnerTimes {
    schedules::InnerSchedule schedule;
    std::vector<double> flow_s;      // (pieces) a collective's flow, alone on its links; 0 for compute
    costmodel::InnerResult result;   // piece times from the part's start
  };
  struct Block {
    Act id;                          // the Inner exec
    int unit, iteration, position;
    std::vector<InnerPart> parts;
  };
  // Blocking actions of isolated groups as one exec each (ring_block), expanded after the run.
  struct RingBlock {
    Act id;                          // the Inner exec
    int stage;
    double compute_s, flow_s, count; // its compute (what-if applied), ring flow alone, all-reduces
  };
  bool collapse_rings_ = false;
  std::vector<RingBlock> ring_blocks_;
  double ring_alone_s(int u, int stage, double count) const;
  Act ring_block(int u, int k, int pos, int stage, double compute_s, double count, Act prev, Act* first);
  void expand_rings();
  bool collapse_inner_ = false;
  std::vector<Block> blocks_;
  std::map<std::tuple<int, int, int, int>, InnerTimes> inner_memo_;  // (stage, op, layers, recompute layers)
  bool inner_isolated() const;
  const InnerTimes& inner_times(int u, const InnerPart& part);
  Act inner_block(int u, int k, int pos, Act prev, std::vector<InnerPart> parts, Act* first);
  void expand_blocks();
  Act split_backward(int u, int k, int pos, double seconds, Act prev, const std::vector<std::pair<double, int>>& cuts);

  // executor.cpp: transfers, data-parallel rings, host copies.
  void build_edges();
  Done& transfer(int k, bool fwd, int stage, int mb, int d);
  struct Member {  // one rank of a data-parallel ring: the reduction at (rank, pos) of dp index d
    int rank, pos, d;
  };
  std::vector<Member> ring_members(int r, int pos) const;
  std::tuple<int, int, int> prev_reduce(int k, int r, int pos) const;
  Done member_issue(int k, const Member& m);
  Act dp_flow(int k, const Member& a, const Member& b, int t, double bytes);
  void ring_phase(int k, const std::vector<Member>& mem, const std::vector<int>& idx, int t, int steps, double step_bytes,
                  const std::vector<Done>& start, std::vector<Done>& out);
  enum class Half { Both, ReduceScatter, AllGather };  // an all-reduce or one of its halves
  std::vector<Done> flat_ring(int k, const std::vector<Member>& mem, int t, double bytes, const std::vector<Done>& issue,
                              Half half);
  // `path`: the group's (the dp axis's when null), for the form the evaluator would pick.
  std::vector<Done> dp_allreduce(int k, const std::vector<Member>& mem, int t, double bytes, const std::vector<Done>& issue,
                                 Half half, const costmodel::AllReducePath* path = nullptr);
  // A reduction on each sub-group of the ring's members whose dp indices are `stride` apart, after
  // done[] (lane t): the routed experts' gradients on the expert-data-parallel groups (stride ep,
  // Workload::expert_reduce_bytes) and HSDP's shards on their copies (stride shard group,
  // Workload::replica_reduce_bytes).
  void strided_reductions(int k, const std::vector<Member>& mem, int t, double bytes, int stride, Half half,
                          std::vector<Done>& done);
  struct LinkShare {  // one link's share of a pipelined collective: members' indices and its bytes
    int from, to;
    double bytes;
  };
  std::vector<Done> fill_then_stream(int k, const std::vector<Member>& mem, int t, const std::vector<Done>& issue,
                                     const std::vector<std::pair<int, int>>& fill, const std::vector<LinkShare>& streams);
  std::vector<Done>& param_gather(int k, int r, int pos, bool tail);
  std::vector<Done>& ring(int k, int r, int pos);
  Done copy(int u, int k, int pos, bool to_host, const Done& prev);
  std::vector<Act> copies_issue(int k, int r, int pos, int d) const;
  [[noreturn]] void report_deadlock() const;
};

}  // namespace stagecraft::sim::detail
