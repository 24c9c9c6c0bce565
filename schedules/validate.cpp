#include "schedules/validate.h"

#include <map>

#include <cmath>
#include <sstream>

#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/grid.h"

namespace stagecraft::schedules {
namespace {

// Where each kind of action of one (stage, microbatch) sits: rank-local list position of its
// first occurrence, and how many there are.
struct Slot {
  int pos = -1;
  int count = 0;
  void add(int p) {
    if (count++ == 0) pos = p;
  }
};

enum Kind { kF, kB, kI, kW, kR, kSendF, kRecvF, kSendB, kRecvB, kOffload, kReload, kNumKinds };

struct Index {
  int m = 0;
  std::vector<Slot> slots;  // (num_stages * m * kNumKinds)
  Slot& at(int stage, int mb, Kind k) {
    return slots[(static_cast<size_t>(stage) * m + mb) * kNumKinds + k];
  }
};

struct Failure {
  std::string reason;
  std::vector<std::pair<int, int>> marks;
};

std::string act(int stage, Op op, int mb) { return to_text(Action::make(stage, op, mb)); }

class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {
    idx_.m = s.num_microbatches;
    idx_.slots.assign(static_cast<size_t>(s.num_stages) * s.num_microbatches * kNumKinds, {});
  }

  bool run(Failure& f) {
    return scan(f) && check_backwards(f) && check_forwards(f) && check_order(f) &&
           check_comm(f) && check_offload(f) && check_reductions(f) && check_fsdp(f);
  }

 private:
  const Schedule& s_;
  Index idx_;
  bool lowered_ = false;
  std::vector<double> reduce_sum_;

  bool fail(Failure& f, int rank, int step, const std::string& why) {
    const auto& list = s_.actions[static_cast<size_t>(rank)];
    std::string what = step < static_cast<int>(list.size()) ? " (" + to_text(list[static_cast<size_t>(step)]) + ")" : " (end of list)";
    f.reason = "rank " + std::to_string(rank) + " step " + std::to_string(step) + what + ": " + why;
    f.marks = {{rank, step}};
    return false;
  }
  int end_of(int rank) const { return static_cast<int>(s_.actions[static_cast<size_t>(rank)].size()); }

  bool check_stage(Failure& f, int r, int pos, int stage, const char* field) {
    if (stage < 0 || stage >= s_.num_stages)
      return fail(f, r, pos, std::string(field) + " " + std::to_string(stage) + " is out of range [0, " +
                                 std::to_string(s_.num_stages) + ")");
    if (s_.rank_of(stage) != r)
      return fail(f, r, pos, "stage " + std::to_string(stage) + " is placed on rank " +
                                 std::to_string(s_.rank_of(stage)) + ", not on this rank");
    return true;
  }
  bool check_mb(Failure& f, int r, int pos, int mb) {
    if (mb < 0 || mb >= s_.num_microbatches)
      return fail(f, r, pos, "microbatch " + std::to_string(mb) + " is out of range [0, " +
                                 std::to_string(s_.num_microbatches) + ")");
    return true;
  }

  Kind kind_of(Op op) const {
    switch (op) {
      case Op::F: return kF;
      case Op::B: return kB;
      case Op::I: return kI;
      case Op::W: return kW;
      case Op::R: return kR;
      case Op::SEND_F: return kSendF;
      case Op::RECV_F: return kRecvF;
      case Op::SEND_B: return kSendB;
      case Op::RECV_B: return kRecvB;
      case Op::OFFLOAD: return kOffload;
      case Op::RELOAD: return kReload;
      default: return kNumKinds;
    }
  }

  // Records every action; checks ranges, placement, duplicates, fields, OPTIMIZER last.
  bool scan(Failure& f) {
    lowered_ = s_.is_lowered();
    reduce_sum_.assign(static_cast<size_t>(s_.num_stages), 0.0);
    for (int r = 0; r < s_.num_ranks; ++r) {
      const auto& list = s_.actions[static_cast<size_t>(r)];
      int optimizer_at = -1;
      const std::vector<int> bwd = backwards_before(list);
      for (int p = 0; p < static_cast<int>(list.size()); ++p) {
        const Action& a = list[static_cast<size_t>(p)];
        if (a.op == Op::OPTIMIZER) {
          if (optimizer_at >= 0) return fail(f, r, p, "a second OPTIMIZER on this rank");
          optimizer_at = p;
          continue;
        }
        if (optimizer_at >= 0 && is_compute(a.op))
          return fail(f, r, p, "compute after this rank's OPTIMIZER (step " + std::to_string(optimizer_at) + ")");
        if (!check_stage(f, r, p, a.stage, "stage")) return false;
        if (is_fsdp(a.op)) continue;  // check_fsdp
        if (!(a.fraction > 0 && a.fraction <= 1))
          return fail(f, r, p, "fraction " + std::to_string(a.fraction) + " is outside (0, 1]");
        if (!(a.early >= 0 && a.early < 1) || (a.early > 0 && a.op != Op::REDUCE_GRAD))
          return fail(f, r, p, "early " + std::to_string(a.early) + " is invalid (REDUCE_GRAD only, in [0, 1))");
        if (a.op == Op::REDUCE_GRAD) {
          if (a.early > 0 && bwd[static_cast<size_t>(p)] < 0)  // reduces_after_backward, for the whole list
            return fail(f, r, p, "an early REDUCE_GRAD must follow a backward of its stage (B, W or OVERLAP_F_B), "
                                 "with only sends and reductions between");
          reduce_sum_[static_cast<size_t>(a.stage)] += a.fraction;
          continue;
        }
        if (!check_mb(f, r, p, a.microbatch)) return false;
        if (a.op == Op::OVERLAP_F_B) {
          if (!check_stage(f, r, p, a.b_stage, "backward stage")) return false;
          if (!check_mb(f, r, p, a.b_microbatch)) return false;
          if (!record(f, r, p, a.stage, a.microbatch, kF)) return false;
          if (!record(f, r, p, a.b_stage, a.b_microbatch, kind_of(a.b_op))) return false;
          continue;
        }
        if (is_p2p(a.op) && a.peer >= 0) {
          bool toward_next = a.op == Op::SEND_F || a.op == Op::RECV_B;
          int implied = toward_next ? s_.next_stage(a.stage) : s_.prev_stage(a.stage);
          if (a.peer != implied)
            return fail(f, r, p, "peer stage " + std::to_string(a.peer) + " is not the stage adjacent to " +
                                     std::to_string(a.stage) + " in that direction (" + std::to_string(implied) + ")");
        }
        if (!record(f, r, p, a.stage, a.microbatch, kind_of(a.op))) return false;
      }
    }
    return true;
  }

  // FSDP's UNSHARD and RESHARD (PyTorch's _add_unshard_reshard): per stage of a rank they
  // alternate, UNSHARD first, and a stage that has them computes only while gathered (between an
  // UNSHARD and the next RESHARD).
  bool check_fsdp(Failure& f) {
    for (int r = 0; r < s_.num_ranks; ++r) {
      const auto& list = s_.actions[static_cast<size_t>(r)];
      std::map<int, bool> gathered;  // stage -> gathered now; present only for stages with FSDP actions
      for (const Action& a : list)
        if (is_fsdp(a.op)) gathered[a.stage] = false;
      if (gathered.empty()) continue;
      for (int p = 0; p < static_cast<int>(list.size()); ++p) {
        const Action& a = list[static_cast<size_t>(p)];
        if (is_fsdp(a.op)) {
          bool& g = gathered[a.stage];
          if (a.op == Op::UNSHARD && g)
            return fail(f, r, p, "a second UNSHARD of stage " + std::to_string(a.stage) + " without a RESHARD between");
          if (a.op == Op::RESHARD && !g)
            return fail(f, r, p, "RESHARD of stage " + std::to_string(a.stage) + " that is not gathered (no UNSHARD before it)");
          g = a.op == Op::UNSHARD;
          continue;
        }
        if (!is_compute(a.op) || a.op == Op::OPTIMIZER) continue;
        for (int st : {a.stage, a.op == Op::OVERLAP_F_B ? a.b_stage : -1}) {
          auto it = gathered.find(st);
          if (it != gathered.end() && !it->second)
            return fail(f, r, p, "stage " + std::to_string(st) + " computes while its parameters are sharded (UNSHARD it first)");
        }
      }
    }
    return true;
  }

  bool record(Failure& f, int r, int p, int stage, int mb, Kind k) {
    Slot& sl = idx_.at(stage, mb, k);
    if (sl.count > 0 && k != kOffload && k != kReload) {
      static const char* names[] = {"F", "B", "I", "W", "R", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
      return fail(f, r, p, std::string("a second ") + names[k] + " of stage " + std::to_string(stage) +
                               " microbatch " + std::to_string(mb) + " (first at step " + std::to_string(sl.pos) + ")");
    }
    sl.add(p);
    return true;
  }

  // One F per (stage, microbatch) over exactly one chain.
  bool check_forwards(Failure& f) {
    int S = s_.stages_per_chain();
    for (int mb = 0; mb < s_.num_microbatches; ++mb) {
      int chain = -1;
      for (int st = 0; st < s_.num_stages; ++st) {
        if (idx_.at(st, mb, kF).count == 0) continue;
        if (chain < 0) chain = s_.chain_of(st);
        if (s_.chain_of(st) != chain)
          return fail(f, s_.rank_of(st), idx_.at(st, mb, kF).pos,
                      "microbatch " + std::to_string(mb) + " runs forwards in two pipelines (chains " +
                          std::to_string(chain) + " and " + std::to_string(s_.chain_of(st)) + ")");
      }
      if (chain < 0) chain = 0;
      for (int k = 0; k < S; ++k) {
        int st = chain * S + k;
        if (idx_.at(st, mb, kF).count == 0)
          return fail(f, s_.rank_of(st), end_of(s_.rank_of(st)),
                      "missing forward " + act(st, Op::F, mb) + " of stage " + std::to_string(st) +
                          " microbatch " + std::to_string(mb));
      }
    }
    return true;
  }

  // Exactly one B, or one I and one W, for every forward; nothing for stages without one.
  bool check_backwards(Failure& f) {
    for (int st = 0; st < s_.num_stages; ++st) {
      int r = s_.rank_of(st);
      for (int mb = 0; mb < s_.num_microbatches; ++mb) {
        const Slot &F = idx_.at(st, mb, kF), &B = idx_.at(st, mb, kB), &I = idx_.at(st, mb, kI),
                   &W = idx_.at(st, mb, kW);
        if (F.count == 0) {
          for (Kind k : {kB, kI, kW, kR})
            if (idx_.at(st, mb, k).count)
              return fail(f, r, idx_.at(st, mb, k).pos, "a backward or recompute for a (stage, microbatch) that has no forward");
          continue;
        }
        if (B.count && (I.count || W.count))
          return fail(f, r, std::max(I.pos, W.pos), "both a full backward B and a split I/W for " +
                                                        act(st, Op::F, mb).substr(0) + "'s stage and microbatch");
        if (!B.count && !I.count)
          return fail(f, r, end_of(r), "missing backward " + act(st, Op::B, mb) + " (or " + act(st, Op::I, mb) + ")");
        if (I.count && !W.count)
          return fail(f, r, end_of(r), "missing weight backward " + act(st, Op::W, mb) + " after " + act(st, Op::I, mb));
        if (W.count && !I.count)
          return fail(f, r, W.pos, "a weight backward W without its input backward I");
      }
    }
    return true;
  }

  // F < R < B/I < W on the rank; stage order where neighbouring stages share a rank.
  bool check_order(Failure& f) {
    for (int st = 0; st < s_.num_stages; ++st) {
      int r = s_.rank_of(st);
      for (int mb = 0; mb < s_.num_microbatches; ++mb) {
        const Slot& F = idx_.at(st, mb, kF);
        if (!F.count) continue;
        const Slot& bw = idx_.at(st, mb, kB).count ? idx_.at(st, mb, kB) : idx_.at(st, mb, kI);
        if (bw.pos <= F.pos)
          return fail(f, r, bw.pos, "backward before its forward " + act(st, Op::F, mb) + " (step " + std::to_string(F.pos) + ")");
        const Slot& W = idx_.at(st, mb, kW);
        if (W.count && W.pos <= bw.pos)
          return fail(f, r, W.pos, "W before its I " + act(st, Op::I, mb) + " (step " + std::to_string(bw.pos) + ")");
        const Slot& R = idx_.at(st, mb, kR);
        if (R.count && (R.pos <= F.pos || R.pos >= bw.pos))
          return fail(f, r, R.pos, "recompute must come after the forward (step " + std::to_string(F.pos) +
                                       ") and before the backward (step " + std::to_string(bw.pos) + ")");
        int pv = s_.prev_stage(st);
        if (pv >= 0 && s_.rank_of(pv) == r && idx_.at(pv, mb, kF).pos >= F.pos)
          return fail(f, r, F.pos, "forward before the forward of the previous stage " + act(pv, Op::F, mb) +
                                       " on the same rank (step " + std::to_string(idx_.at(pv, mb, kF).pos) + ")");
        int nx = s_.next_stage(st);
        if (nx >= 0 && s_.rank_of(nx) == r) {
          const Slot& nb = idx_.at(nx, mb, kB).count ? idx_.at(nx, mb, kB) : idx_.at(nx, mb, kI);
          if (nb.pos >= bw.pos)
            return fail(f, r, bw.pos, "backward before the backward of the next stage (stage " + std::to_string(nx) +
                                          ", step " + std::to_string(nb.pos) + ") on the same rank");
        }
      }
    }
    return true;
  }

  // In a lowered schedule every cross-rank boundary has one SEND after the producer and one
  // RECV before the consumer, and there are no other sends or receives.
  bool check_comm(Failure& f) {
    for (int st = 0; st < s_.num_stages; ++st) {
      int r = s_.rank_of(st);
      int nx = s_.next_stage(st), pv = s_.prev_stage(st);
      bool cross_next = nx >= 0 && s_.rank_of(nx) != r;
      bool cross_prev = pv >= 0 && s_.rank_of(pv) != r;
      for (int mb = 0; mb < s_.num_microbatches; ++mb) {
        bool has_f = idx_.at(st, mb, kF).count > 0;
        const Slot& SF = idx_.at(st, mb, kSendF);
        const Slot& RF = idx_.at(st, mb, kRecvF);
        const Slot& SB = idx_.at(st, mb, kSendB);
        const Slot& RB = idx_.at(st, mb, kRecvB);
        if (!lowered_) continue;
        const Slot& F = idx_.at(st, mb, kF);
        const Slot& bw = idx_.at(st, mb, kB).count ? idx_.at(st, mb, kB) : idx_.at(st, mb, kI);
        auto unexpected = [&](const Slot& sl, const char* op, const char* why) {
          return fail(f, r, sl.pos, std::string(op) + " with no matching receive or send: " + why);
        };
        if (SF.count && !(has_f && cross_next)) return unexpected(SF, "SEND_F", "the next stage is on the same rank or absent");
        if (RF.count && !(has_f && cross_prev)) return unexpected(RF, "RECV_F", "the previous stage is on the same rank or absent");
        if (SB.count && !(has_f && cross_prev)) return unexpected(SB, "SEND_B", "the previous stage is on the same rank or absent");
        if (RB.count && !(has_f && cross_next)) return unexpected(RB, "RECV_B", "the next stage is on the same rank or absent");
        if (!has_f) continue;
        if (cross_next) {
          if (!SF.count) return fail(f, r, F.pos, "forward output of " + act(st, Op::F, mb) + " is never sent (missing " + act(st, Op::SEND_F, mb) + ")");
          if (SF.pos < F.pos) return fail(f, r, SF.pos, "SEND_F before the forward that produces it (step " + std::to_string(F.pos) + ")");
          if (!RB.count) return fail(f, r, bw.pos, "gradient for " + act(st, Op::B, mb) + " is never received (missing " + act(st, Op::RECV_B, mb) + ")");
          if (RB.pos > bw.pos) return fail(f, r, RB.pos, "RECV_B after the backward that needs it (step " + std::to_string(bw.pos) + ")");
          int nr = s_.rank_of(nx);
          if (!idx_.at(nx, mb, kRecvF).count)
            return fail(f, r, SF.pos, "SEND_F is not matched by " + act(nx, Op::RECV_F, mb) + " on rank " + std::to_string(nr));
          (void)nr;
        }
        if (cross_prev) {
          if (!RF.count) return fail(f, r, F.pos, "input of " + act(st, Op::F, mb) + " is never received (missing " + act(st, Op::RECV_F, mb) + ")");
          if (RF.pos > F.pos) return fail(f, r, RF.pos, "RECV_F after the forward that needs it (step " + std::to_string(F.pos) + ")");
          if (!SB.count) return fail(f, r, bw.pos, "input gradient of the backward is never sent (missing " + act(st, Op::SEND_B, mb) + ")");
          if (SB.pos < bw.pos) return fail(f, r, SB.pos, "SEND_B before the backward that produces it (step " + std::to_string(bw.pos) + ")");
          if (!idx_.at(pv, mb, kRecvB).count)
            return fail(f, r, SB.pos, "SEND_B is not matched by " + act(pv, Op::RECV_B, mb) + " on rank " + std::to_string(s_.rank_of(pv)));
        }
      }
    }
    return true;
  }

  bool check_offload(Failure& f) {
    for (int st = 0; st < s_.num_stages; ++st) {
      int r = s_.rank_of(st);
      for (int mb = 0; mb < s_.num_microbatches; ++mb) {
        const Slot &O = idx_.at(st, mb, kOffload), &L = idx_.at(st, mb, kReload);
        if (!O.count && !L.count) continue;
        const Slot& F = idx_.at(st, mb, kF);
        const Slot& bw = idx_.at(st, mb, kB).count ? idx_.at(st, mb, kB) : idx_.at(st, mb, kI);
        const Slot& R = idx_.at(st, mb, kR);
        int use = R.count ? R.pos : bw.pos;
        if (O.count != 1 || L.count != 1)
          return fail(f, r, O.count ? O.pos : L.pos, "each OFFLOAD needs exactly one RELOAD of the same stage and microbatch");
        if (O.pos < F.pos) return fail(f, r, O.pos, "OFFLOAD before the forward that produces the activations");
        if (L.pos < O.pos) return fail(f, r, L.pos, "RELOAD before its OFFLOAD (step " + std::to_string(O.pos) + ")");
        if (L.pos > use) return fail(f, r, L.pos, "RELOAD after the recompute or backward that needs it (step " + std::to_string(use) + ")");
      }
    }
    return true;
  }

  bool check_reductions(Failure& f) {
    for (int st = 0; st < s_.num_stages; ++st) {
      double sum = reduce_sum_[static_cast<size_t>(st)];
      if (sum != 0 && std::fabs(sum - 1) > 1e-9) {
        int r = s_.rank_of(st);
        const auto& list = s_.actions[static_cast<size_t>(r)];
        int p = 0;
        for (int i = 0; i < static_cast<int>(list.size()); ++i)
          if (list[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && list[static_cast<size_t>(i)].stage == st) p = i;
        std::ostringstream o;
        o << "REDUCE_GRAD fractions of stage " << st << " add up to " << sum << ", not 1";
        return fail(f, r, p, o.str());
      }
    }
    return true;
  }
};

}  // namespace

DryRunResult dry_run(const Schedule& s) {
  DryRunResult out;
  const int m = s.num_microbatches;
  const bool lowered = s.is_lowered();
  auto key = [m](int st, int mb) { return static_cast<size_t>(st) * m + mb; };
  size_t n = static_cast<size_t>(s.num_stages) * m;
  // Step at which each event happened; -1 = not yet.
  std::vector<int> f_at(n, -1), bw_at(n, -1), sendf_at(n, -1), sendb_at(n, -1), recvf_at(n, -1), recvb_at(n, -1);
  out.step_of.resize(static_cast<size_t>(s.num_ranks));
  for (int r = 0; r < s.num_ranks; ++r) out.step_of[static_cast<size_t>(r)].assign(s.actions[static_cast<size_t>(r)].size(), -1);
  std::vector<size_t> next(static_cast<size_t>(s.num_ranks), 0);

  auto done_before = [](int at, int t) { return at >= 0 && at < t; };
  // What (stage, mb) input the forward waits for; empty string when ready.
  auto wait_fwd = [&](int r, int st, int mb, int t) -> std::string {
    int pv = s.prev_stage(st);
    if (pv < 0 || s.rank_of(pv) == r) return "";
    if (lowered) {
      if (!done_before(recvf_at[key(st, mb)], t)) return "its own " + to_text(Action::make(st, Op::RECV_F, mb)) + ", not posted before it";
      if (!done_before(sendf_at[key(pv, mb)], t))
        return to_text(Action::make(pv, Op::SEND_F, mb)) + " from rank " + std::to_string(s.rank_of(pv));
      return "";
    }
    if (!done_before(f_at[key(pv, mb)], t)) return to_text(Action::make(pv, Op::F, mb)) + " on rank " + std::to_string(s.rank_of(pv));
    return "";
  };
  auto wait_bwd = [&](int r, int st, int mb, int t) -> std::string {
    int nx = s.next_stage(st);
    if (nx < 0 || s.rank_of(nx) == r) return "";
    if (lowered) {
      if (!done_before(recvb_at[key(st, mb)], t)) return "its own " + to_text(Action::make(st, Op::RECV_B, mb)) + ", not posted before it";
      if (!done_before(sendb_at[key(nx, mb)], t))
        return to_text(Action::make(nx, Op::SEND_B, mb)) + " from rank " + std::to_string(s.rank_of(nx));
      return "";
    }
    if (!done_before(bw_at[key(nx, mb)], t)) return "the backward of stage " + std::to_string(nx) + " microbatch " + std::to_string(mb) + " on rank " + std::to_string(s.rank_of(nx));
    return "";
  };
  auto waits_for = [&](int r, const Action& a, int t) -> std::string {
    switch (a.op) {
      case Op::F: return wait_fwd(r, a.stage, a.microbatch, t);
      case Op::B: case Op::I: return wait_bwd(r, a.stage, a.microbatch, t);
      case Op::OVERLAP_F_B: {
        std::string w = wait_fwd(r, a.stage, a.microbatch, t);
        return w.empty() ? wait_bwd(r, a.b_stage, a.b_microbatch, t) : w;
      }
      default: return "";
    }
  };
  auto mark_done = [&](const Action& a, int t) {
    switch (a.op) {
      case Op::F: f_at[key(a.stage, a.microbatch)] = t; break;
      case Op::B: case Op::I: bw_at[key(a.stage, a.microbatch)] = t; break;
      case Op::OVERLAP_F_B:
        f_at[key(a.stage, a.microbatch)] = t;
        bw_at[key(a.b_stage, a.b_microbatch)] = t;
        break;
      case Op::SEND_F: sendf_at[key(a.stage, a.microbatch)] = t; break;
      case Op::SEND_B: sendb_at[key(a.stage, a.microbatch)] = t; break;
      case Op::RECV_F: recvf_at[key(a.stage, a.microbatch)] = t; break;
      case Op::RECV_B: recvb_at[key(a.stage, a.microbatch)] = t; break;
      default: break;
    }
  };

  size_t remaining = s.total_actions();
  int t = 0;
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < s.num_ranks; ++r) {
      auto& list = s.actions[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      if (i >= list.size()) continue;
      if (!waits_for(r, list[i], t).empty()) continue;
      out.step_of[static_cast<size_t>(r)][i] = t;
      mark_done(list[i], t);
      ++i;
      --remaining;
      progress = true;
    }
    if (!progress) {
      out.deadlock = true;
      std::ostringstream why;
      why << "deadlock at dry-run step " << t << ":";
      for (int r = 0; r < s.num_ranks; ++r) {
        size_t i = next[static_cast<size_t>(r)];
        const auto& list = s.actions[static_cast<size_t>(r)];
        if (i >= list.size()) continue;
        why << " rank " << r << " waits at step " << i << " (" << to_text(list[i]) << ") for "
            << waits_for(r, list[i], t) << ";";
        out.marks.emplace_back(r, static_cast<int>(i));
      }
      out.reason = why.str();
      out.steps = t;
      return out;
    }
    ++t;
  }
  out.steps = t;
  return out;
}

ValidationResult check_schedule(const Schedule& s) {
  check_shape(s);
  ValidationResult res;
  Failure f;
  Checker c(s);
  if (!c.run(f)) {
    res.ok = false;
    res.reason = f.reason;
    res.marks = f.marks;
    return res;
  }
  DryRunResult d = dry_run(s);
  if (d.deadlock) {
    res.ok = false;
    res.reason = d.reason;
    res.marks = d.marks;
  }
  return res;
}

void validate(const Schedule& s) {
  ValidationResult r = check_schedule(s);
  if (r.ok) return;
  GridOptions g;
  g.marks = r.marks;
  g.window = 6;
  throw ScheduleError("schedule '" + s.name + "' is invalid: " + r.reason, format_grid(s, g));
}

}  // namespace stagecraft::schedules
