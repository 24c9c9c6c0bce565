#include "sim/executor.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "schedules/error.h"

namespace stagecraft::sim {

namespace sg = simgrid::s4u;
using schedules::Action;
using schedules::Op;
using Act = sg::ActivityPtr;

namespace {

// Activities that must all finish: what a later activity depends on. `chain_only` marks sets
// made only of compute-stream activities of one unit (ordered, so the latest dominates).
struct Done {
  std::vector<Act> acts;
  bool chain_only = true;
};

void add_edge(const Act& pred, const Act& succ) {
  if (!pred || pred == succ || succ->get_dependencies().count(pred)) return;
  if (auto* e = dynamic_cast<sg::Exec*>(pred.get())) e->add_successor(succ);
  else static_cast<sg::Comm*>(pred.get())->add_successor(succ);
}

void add_edges(const Done& d, const Act& succ) {
  for (const Act& a : d.acts) add_edge(a, succ);
}

std::int64_t pos_key(Op op, int stage, int mb) {
  return (static_cast<std::int64_t>(op) << 40) | (static_cast<std::int64_t>(stage) << 20) | (mb + 1);
}

class Runner {
 public:
  Runner(const schedules::Schedule& s, const costmodel::CostTable& c, const Workload& w, const costmodel::ParallelPlan& p,
         const costmodel::Topology& topo, const Platform& pf, const SimOptions& opt)
      : s_(s), c_(c), w_(w), topo_(topo), pf_(pf), opt_(opt), K_(opt.iterations), dp_(p.dp), tp_(p.tp),
        U_(s.num_ranks * p.dp) {}

  Execution run();

 private:
  const schedules::Schedule& s_;
  const costmodel::CostTable& c_;
  const Workload& w_;
  const costmodel::Topology& topo_;
  const Platform& pf_;
  SimOptions opt_;
  int K_, dp_, tp_, U_;
  Execution ex_;
  std::vector<Act> all_;                                 // every activity, index = record id
  std::vector<std::vector<std::vector<Act>>> post_;      // [k][unit][pos] last compute-stream activity before pos
  std::vector<std::vector<std::vector<Act>>> compute_;   // [k][unit][pos] the exec of a compute action
  std::vector<std::unordered_map<std::int64_t, int>> pos_of_;  // (ranks) (op, stage, mb) -> position
  std::map<std::tuple<int, int, int, int, int>, Done> transfers_;  // (k, dir, consumer stage, mb, d)
  std::map<std::tuple<int, int, int>, std::vector<Done>> rings_;   // (k, rank, pos) -> done of each dp member
  std::vector<std::tuple<int, int, int>> last_ring_;      // (ranks) the ring created last, k = -1 none

  int rank_of_unit(int u) const { return u / dp_; }
  int gpu(int u, int t) const { return topo_.global_rank({t, u % dp_, u / dp_}); }

  Act add(Act a, Record r) {
    a->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(all_.size())));
    all_.push_back(a);
    ex_.records.push_back(r);
    return a;
  }
  Act exec(int u, int k, int pos, double seconds, RecKind kind) {
    sg::Host* h = pf_.gpus[static_cast<size_t>(gpu(u, 0))];
    Record r;
    r.unit = r.peer_unit = u;
    r.iteration = k;
    r.position = pos;
    r.src_gpu = r.dst_gpu = gpu(u, 0);
    r.kind = kind;
    return add(sg::Exec::init()->set_flops_amount(std::max(0.0, seconds) * h->get_speed())->set_host(h), r);
  }
  Act flow(sg::Host* from, sg::Host* to, double bytes, Record r) {
    r.kind = RecKind::Flow;
    r.bytes = bytes;
    auto payload = static_cast<std::uint64_t>(std::llround(std::max(0.0, bytes)));
    return add(sg::Comm::sendto_init(from, to)->set_payload_size(payload), r);
  }

  // Share of a stage's activations one copy moves: (1 - f) + f * ckpt/act, f its recompute share.
  double kept_share(const Action& a) const {
    const auto& sc = c_.stages[static_cast<size_t>(a.stage)];
    double f = 0;
    for (const Action& x : s_.actions[static_cast<size_t>(s_.rank_of(a.stage))])
      if (x.op == Op::R && x.stage == a.stage && x.microbatch == a.microbatch) f = x.fraction;
    return sc.act_bytes > 0 ? (1 - f) + f * sc.ckpt_bytes / sc.act_bytes : 1.0;
  }
  double duration(const Action& a, int rank, double* tp_s, double* tp_count) const;
  void build_chains();
  Act tp_ring(int u, int k, int pos, Act after, double count);
  void build_edges();
  Done& transfer(int k, bool fwd, int stage, int mb, int d);
  std::vector<Done>& ring(int k, int r, int pos);
  Done copy(int u, int k, int pos, bool to_host, const Done& prev);
  std::vector<Act> copies_issue(int k, int r, int pos, int d) const;
  [[noreturn]] void report_deadlock() const;
};

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
    case Op::R:
      *tp_s = a.fraction * st(a.stage).tp_comm_f_s;
      *tp_count = a.fraction * st(a.stage).tp_allreduces_f;
      return a.fraction * st(a.stage).r_s;
    case Op::OVERLAP_F_B:
      *tp_s = st(a.stage).tp_comm_f_s;
      *tp_count = st(a.stage).tp_allreduces_f;
      tp_i(a.b_stage);
      return st(a.stage).f_s + (a.b_op == Op::I ? st(a.b_stage).i_s : st(a.b_stage).b_s);
    case Op::OPTIMIZER: return c_.optimizer_s[static_cast<size_t>(rank)];
    default: return 0;
  }
}

// The tensor-parallel all-reduces of one compute action, aggregated: each ring member sends
// count * 2(t-1)/t * S bytes to the next at once (the ring's bandwidth term, sharing links as
// the steps would), then a pad on the compute host adds the remaining 2(t-1)*count - 1 step
// latencies (the flow itself carries one).
Act Runner::tp_ring(int u, int k, int pos, Act after, double count) {
  const int t = tp_;
  const Action& a = s_.actions[static_cast<size_t>(rank_of_unit(u))][static_cast<size_t>(pos)];
  const double bytes_each = c_.stages[static_cast<size_t>(a.stage)].tp_allreduce_bytes;
  const double steps = 2.0 * (t - 1) * count;
  Act pad = exec(u, k, pos, std::max(0.0, steps - 1) * w_.tp_alpha_s, RecKind::TpPad);
  for (int j = 0; j < t; ++j) {
    Record r;
    r.unit = r.peer_unit = u;
    r.iteration = k;
    r.position = pos;
    r.src_gpu = gpu(u, j);
    r.dst_gpu = gpu(u, (j + 1) % t);
    r.comm = CommKind::TensorParallel;
    Act f = flow(pf_.gpus[static_cast<size_t>(r.src_gpu)], pf_.gpus[static_cast<size_t>(r.dst_gpu)],
                 steps / t * bytes_each, r);
    add_edge(after, f);
    add_edge(f, pad);
  }
  return pad;
}

void Runner::build_chains() {
  post_.assign(static_cast<size_t>(K_), std::vector<std::vector<Act>>(static_cast<size_t>(U_)));
  compute_ = post_;
  std::vector<Act> last(static_cast<size_t>(U_));
  const bool explicit_tp = opt_.tp_comm == TpComm::Explicit && tp_ > 1;
  for (int k = 0; k < K_; ++k)
    for (int u = 0; u < U_; ++u) {
      const int r = rank_of_unit(u);
      const auto& list = s_.actions[static_cast<size_t>(r)];
      auto& po = post_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      auto& co = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      po.resize(list.size());
      co.resize(list.size());
      Act& prev = last[static_cast<size_t>(u)];
      for (size_t i = 0; i < list.size(); ++i) {
        po[i] = prev;
        if (!schedules::is_compute(list[i].op)) continue;
        double tp_s = 0, count = 0;
        double d = duration(list[i], r, &tp_s, &count);
        const bool ring = explicit_tp && count > 0;
        if (ring && tp_s > d + 1e-15)
          throw InputError("simulator: stage " + std::to_string(list[i].stage) + " folds " + std::to_string(tp_s) +
                           " s of tensor-parallel communication into a " + std::to_string(d) + " s action (must be at most it)");
        Act e = exec(u, k, static_cast<int>(i), ring ? d - tp_s : d, RecKind::Compute);
        add_edge(prev, e);
        co[i] = e;
        prev = ring ? tp_ring(u, k, static_cast<int>(i), e, count) : e;
      }
    }
}

Done& Runner::transfer(int k, bool fwd, int cs, int mb, int d) {
  auto key = std::make_tuple(k, fwd ? 0 : 1, cs, mb, d);
  if (auto it = transfers_.find(key); it != transfers_.end()) return it->second;
  const int ps = fwd ? s_.prev_stage(cs) : s_.next_stage(cs);
  const int rr = s_.rank_of(cs);
  const Op send = fwd ? Op::SEND_F : Op::SEND_B;
  const std::string what = std::string(fwd ? "RECV_F" : "RECV_B") + " of stage " + std::to_string(cs) + " microbatch " +
                           std::to_string(mb);
  if (ps < 0) throw InputError("simulator: rank " + std::to_string(rr) + " posts " + what + " but that stage has no neighbour");
  const int rs = s_.rank_of(ps);
  auto sp = pos_of_[static_cast<size_t>(rs)].find(pos_key(send, ps, mb));
  if (sp == pos_of_[static_cast<size_t>(rs)].end())
    throw InputError("simulator: rank " + std::to_string(rr) + " posts " + what + " but rank " + std::to_string(rs) +
                     " never sends it (no " + std::to_string(ps) + std::string(fwd ? "SEND_F" : "SEND_B") + std::to_string(mb) + ")");
  auto rp = pos_of_[static_cast<size_t>(rr)].at(pos_key(fwd ? Op::RECV_F : Op::RECV_B, cs, mb));
  const int us = rs * dp_ + d, ur = rr * dp_ + d;
  Act spost = post_[static_cast<size_t>(k)][static_cast<size_t>(us)][static_cast<size_t>(sp->second)];
  Act rpost = post_[static_cast<size_t>(k)][static_cast<size_t>(ur)][static_cast<size_t>(rp)];
  const double bytes = fwd ? w_.send_f_bytes[static_cast<size_t>(ps)] : w_.send_b_bytes[static_cast<size_t>(ps)];
  Done done;
  if (bytes <= 0) {
    for (const Act& a : {spost, rpost})
      if (a) done.acts.push_back(a);
    done.chain_only = false;
    return transfers_[key] = done;
  }
  done.chain_only = false;
  for (int t = 0; t < tp_; ++t) {
    Record r;
    r.unit = us;
    r.peer_unit = ur;
    r.iteration = k;
    r.position = sp->second;
    r.src_gpu = gpu(us, t);
    r.dst_gpu = gpu(ur, t);
    r.comm = CommKind::Pipeline;
    Act f = flow(pf_.gpus[static_cast<size_t>(r.src_gpu)], pf_.gpus[static_cast<size_t>(r.dst_gpu)], bytes, r);
    add_edge(spost, f);
    add_edge(rpost, f);
    done.acts.push_back(f);
  }
  return transfers_[key] = done;
}

// Ring all-reduce of the dp group of (rank r, tp index t), for every t: 2(n-1) steps of S/n
// bytes, member j sending to j+1 (members in dp order, so node by node: one network hop per
// node boundary, as NCCL's rings). Step s of j waits for j's step s-1 and for what j received
// in step s-1; step 0 waits for both ends to have issued the reduction (rendezvous).
std::vector<Done>& Runner::ring(int k, int r, int pos) {
  auto key = std::make_tuple(k, r, pos);
  if (auto it = rings_.find(key); it != rings_.end()) return it->second;
  const int n = dp_;
  const Action& a = s_.actions[static_cast<size_t>(r)][static_cast<size_t>(pos)];
  const double bytes = w_.reduce_bytes[static_cast<size_t>(a.stage)] * a.fraction;
  const auto prev_key = last_ring_[static_cast<size_t>(r)];
  const std::vector<Done>* prev = std::get<0>(prev_key) >= 0 ? &rings_.at(prev_key) : nullptr;
  std::vector<Done> issue(static_cast<size_t>(n)), done(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    Act po = post_[static_cast<size_t>(k)][static_cast<size_t>(r * dp_ + j)][static_cast<size_t>(pos)];
    Done& is = issue[static_cast<size_t>(j)];
    if (po) is.acts.push_back(po);
    if (prev && !(*prev)[static_cast<size_t>(j)].chain_only) {
      for (const Act& x : (*prev)[static_cast<size_t>(j)].acts) is.acts.push_back(x);
      is.chain_only = false;
    }
    for (const Act& x : copies_issue(k, r, pos, j)) {
      is.acts.push_back(x);
      is.chain_only = false;
    }
  }
  if (n <= 1 || bytes <= 0) {
    done = issue;
  } else {
    const int steps = 2 * (n - 1);
    for (int t = 0; t < tp_; ++t) {
      std::vector<Act> cur(static_cast<size_t>(n)), next(static_cast<size_t>(n));  // cur[j]: j -> j+1
      for (int s = 0; s < steps; ++s) {
        for (int j = 0; j < n; ++j) {
          const int u = r * dp_ + j, v = r * dp_ + (j + 1) % n;
          Record rec;
          rec.unit = u;
          rec.peer_unit = v;
          rec.iteration = k;
          rec.position = pos;
          rec.src_gpu = gpu(u, t);
          rec.dst_gpu = gpu(v, t);
          rec.comm = CommKind::DataParallel;
          Act f = flow(pf_.gpus[static_cast<size_t>(rec.src_gpu)], pf_.gpus[static_cast<size_t>(rec.dst_gpu)], bytes / n, rec);
          if (s == 0) {
            add_edges(issue[static_cast<size_t>(j)], f);
            add_edges(issue[static_cast<size_t>((j + 1) % n)], f);
          } else {
            add_edge(cur[static_cast<size_t>(j)], f);
            add_edge(cur[static_cast<size_t>((j + n - 1) % n)], f);
          }
          next[static_cast<size_t>(j)] = f;
        }
        cur.swap(next);
      }
      for (int j = 0; j < n; ++j) {
        Done& d = done[static_cast<size_t>(j)];
        d.chain_only = false;
        d.acts.push_back(cur[static_cast<size_t>(j)]);
        d.acts.push_back(cur[static_cast<size_t>((j + n - 1) % n)]);
      }
    }
  }
  last_ring_[static_cast<size_t>(r)] = key;
  return rings_[key] = done;
}

// Stages holding copies of one model part (Chimera's chains) reduce in one collective: the
// j-th reduction of a copy waits until every other copy has issued its j-th (as the evaluator).
std::vector<Act> Runner::copies_issue(int k, int r, int pos, int d) const {
  std::vector<Act> out;
  if (s_.num_chains <= 1) return out;
  const auto& list = s_.actions[static_cast<size_t>(r)];
  const int st = list[static_cast<size_t>(pos)].stage, S = s_.stages_per_chain();
  int j = 0;
  for (int i = 0; i < pos; ++i) j += list[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && list[static_cast<size_t>(i)].stage == st;
  for (int c = 0; c < s_.num_chains; ++c) {
    const int st2 = c * S + s_.model_part(st), r2 = s_.rank_of(st2);
    if (st2 == st) continue;
    const auto& l2 = s_.actions[static_cast<size_t>(r2)];
    for (int i = 0, seen = 0; i < static_cast<int>(l2.size()); ++i) {
      if (l2[static_cast<size_t>(i)].op != Op::REDUCE_GRAD || l2[static_cast<size_t>(i)].stage != st2) continue;
      if (seen++ != j) continue;
      if (const Act& a = post_[static_cast<size_t>(k)][static_cast<size_t>(r2 * dp_ + d)][static_cast<size_t>(i)]) out.push_back(a);
      break;
    }
  }
  return out;
}

Done Runner::copy(int u, int k, int pos, bool to_host, const Done& prev) {
  const Action& a = s_.actions[static_cast<size_t>(rank_of_unit(u))][static_cast<size_t>(pos)];
  const double bytes = w_.copy_bytes[static_cast<size_t>(a.stage)] * kept_share(a);
  Act po = post_[static_cast<size_t>(k)][static_cast<size_t>(u)][static_cast<size_t>(pos)];
  Done done;
  if (bytes <= 0) {
    if (po) done.acts.push_back(po);
    if (!prev.chain_only) done.acts.insert(done.acts.end(), prev.acts.begin(), prev.acts.end());
    done.chain_only = prev.chain_only;
    return done;
  }
  done.chain_only = false;
  for (int t = 0; t < tp_; ++t) {
    const int g = gpu(u, t);
    sg::Host* mem = pf_.host_memory[static_cast<size_t>(g)];
    if (!mem)
      throw InputError("simulator: rank " + std::to_string(rank_of_unit(u)) + " offloads but GPU " + std::to_string(g) +
                       " has no host memory (platform files: give it the property stagecraft_host_memory)");
    Record r;
    r.unit = r.peer_unit = u;
    r.iteration = k;
    r.position = pos;
    r.src_gpu = to_host ? g : -1;
    r.dst_gpu = to_host ? -1 : g;
    r.comm = CommKind::Copy;
    sg::Host* h = pf_.gpus[static_cast<size_t>(g)];
    Act f = to_host ? flow(h, mem, bytes, r) : flow(mem, h, bytes, r);
    add_edge(po, f);
    add_edges(prev, f);
    done.acts.push_back(f);
  }
  return done;
}

void Runner::build_edges() {
  last_ring_.assign(static_cast<size_t>(s_.num_ranks), std::make_tuple(-1, -1, -1));
  std::vector<Done> prev_coll(static_cast<size_t>(U_)), prev_copy(static_cast<size_t>(U_));
  for (int k = 0; k < K_; ++k)
    for (int u = 0; u < U_; ++u) {
      const int r = rank_of_unit(u), d = u % dp_;
      const auto& list = s_.actions[static_cast<size_t>(r)];
      // A forward waits for the input received before it (kind 0); a backward or recompute for
      // the gradient received and the checkpoint reloaded before it (kind 1); W for neither.
      std::map<std::tuple<int, int, int>, std::vector<Done>> pending;
      auto consume = [&](int st, int mb, int kind, const Act& e) {
        auto it = pending.find({st, mb, kind});
        if (it == pending.end()) return;
        for (const Done& x : it->second) add_edges(x, e);
        pending.erase(it);
      };
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const Act& e = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)][i];
        const int pos = static_cast<int>(i);
        switch (a.op) {
          case Op::RECV_F: pending[{a.stage, a.microbatch, 0}].push_back(transfer(k, true, a.stage, a.microbatch, d)); break;
          case Op::RECV_B: pending[{a.stage, a.microbatch, 1}].push_back(transfer(k, false, a.stage, a.microbatch, d)); break;
          case Op::F: consume(a.stage, a.microbatch, 0, e); break;
          case Op::B: case Op::I: case Op::R: consume(a.stage, a.microbatch, 1, e); break;
          case Op::OVERLAP_F_B:
            consume(a.stage, a.microbatch, 0, e);
            consume(a.b_stage, a.b_microbatch, 1, e);
            break;
          case Op::REDUCE_GRAD: prev_coll[static_cast<size_t>(u)] = ring(k, r, pos)[static_cast<size_t>(d)]; break;
          case Op::OFFLOAD: prev_copy[static_cast<size_t>(u)] = copy(u, k, pos, true, prev_copy[static_cast<size_t>(u)]); break;
          case Op::RELOAD:
            prev_copy[static_cast<size_t>(u)] = copy(u, k, pos, false, prev_copy[static_cast<size_t>(u)]);
            pending[{a.stage, a.microbatch, 1}].push_back(prev_copy[static_cast<size_t>(u)]);
            break;
          case Op::OPTIMIZER: add_edges(prev_coll[static_cast<size_t>(u)], e); break;
          default: break;  // sends: the transfer is made when its receive is reached
        }
      }
    }
}

std::string describe(const schedules::Schedule& s, const Record& r, int dp) {
  const int rank = r.unit / dp;
  const Action& a = s.actions[static_cast<size_t>(rank)][static_cast<size_t>(r.position)];
  std::string txt = schedules::to_text(a);
  if (r.kind != RecKind::Flow) return "compute " + txt + " of rank " + std::to_string(rank);
  switch (r.comm) {
    case CommKind::Pipeline:
      return "the transfer " + txt + " from rank " + std::to_string(rank) + " to rank " + std::to_string(r.peer_unit / dp) +
             (r.start_s < 0 ? " (not started: a side has not posted it)" : "");
    case CommKind::DataParallel: return "the data-parallel ring of " + txt + " on rank " + std::to_string(rank);
    case CommKind::TensorParallel: return "the tensor-parallel all-reduce of " + txt + " on rank " + std::to_string(rank);
    case CommKind::Copy: return "the host copy " + txt + " of rank " + std::to_string(rank);
  }
  return txt;
}

void Runner::report_deadlock() const {
  // Per unit with a data-parallel index 0: the first compute of the earliest stuck iteration.
  std::string who;
  int stuck_units = 0;
  for (int u = 0; u < U_; u += dp_) {
    for (int k = 0; k < K_; ++k) {
      const auto& co = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      size_t i = 0;
      for (; i < co.size(); ++i) {
        if (!co[i]) continue;
        auto id = reinterpret_cast<std::uintptr_t>(co[i]->get_data<void>());
        if (ex_.records[id].start_s < 0) break;
      }
      if (i == co.size()) continue;
      ++stuck_units;
      const int rank = rank_of_unit(u);
      who += "\n  rank " + std::to_string(rank) + " (iteration " + std::to_string(k) + ") waits at step " + std::to_string(i) +
             " (" + schedules::to_text(s_.actions[static_cast<size_t>(rank)][i]) + ") for";
      std::set<std::string> waits;
      for (const Act& dep : co[i]->get_dependencies())
        waits.insert(describe(s_, ex_.records[reinterpret_cast<std::uintptr_t>(dep->get_data<void>())], dp_));
      for (const std::string& w : waits) who += "\n    " + w;
      break;
    }
  }
  throw InputError("schedule '" + s_.name + "' deadlocks in the simulator: " + std::to_string(stuck_units) +
                   " pipeline ranks stop (a transfer waits on a receive posted after the compute that waits on it)" + who);
}

Execution Runner::run() {
  ex_.dp = dp_;
  ex_.tp = tp_;
  pos_of_.resize(static_cast<size_t>(s_.num_ranks));
  for (int r = 0; r < s_.num_ranks; ++r) {
    const auto& list = s_.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i)
      if (schedules::is_p2p(list[i].op))
        pos_of_[static_cast<size_t>(r)][pos_key(list[i].op, list[i].stage, list[i].microbatch)] = static_cast<int>(i);
  }
  build_chains();
  build_edges();
  transfers_.clear();
  rings_.clear();
  auto* recs = &ex_.records;
  sg::Activity::on_completion_cb([recs](sg::Activity const& a) {
    Record& r = (*recs)[reinterpret_cast<std::uintptr_t>(a.get_data<void>())];
    r.start_s = a.get_start_time();
    r.end_s = a.get_finish_time();
  });
  for (const Act& a : all_)
    if (a->dependencies_solved()) a->vetoable_start();
  sg::Engine::get_instance()->run();
  for (const Record& r : ex_.records)
    if (r.end_s < 0) report_deadlock();
  return std::move(ex_);
}

}  // namespace

std::vector<std::pair<int, int>> needed_pairs(const schedules::Schedule& s, const costmodel::ParallelPlan& p,
                                              const costmodel::Topology& topo, const SimOptions& opt) {
  std::set<std::pair<int, int>> out;
  for (int st = 0; st < s.num_stages; ++st) {
    const int nx = s.next_stage(st);
    if (nx < 0 || s.rank_of(nx) == s.rank_of(st)) continue;
    for (int t = 0; t < p.tp; ++t)
      for (int d = 0; d < p.dp; ++d) {
        int a = topo.global_rank({t, d, s.rank_of(st)}), b = topo.global_rank({t, d, s.rank_of(nx)});
        out.insert({a, b});
        out.insert({b, a});
      }
  }
  for (int r = 0; r < p.pp; ++r)
    for (int t = 0; t < p.tp; ++t)
      for (int d = 0; d < p.dp; ++d) {
        const int g = topo.global_rank({t, d, r});
        if (p.dp > 1) out.insert({g, topo.global_rank({t, (d + 1) % p.dp, r})});
        if (p.tp > 1 && opt.tp_comm == TpComm::Explicit) out.insert({g, topo.global_rank({(t + 1) % p.tp, d, r})});
      }
  return {out.begin(), out.end()};
}

Execution execute(const schedules::Schedule& s, const costmodel::CostTable& c, const Workload& w,
                  const costmodel::ParallelPlan& p, const costmodel::Topology& topo, const Platform& pf,
                  const SimOptions& opt) {
  return Runner(s, c, w, p, topo, pf, opt).run();
}

}  // namespace stagecraft::sim
