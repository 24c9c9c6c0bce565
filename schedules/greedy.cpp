#include "schedules/greedy.h"

#include <algorithm>
#include <limits>

#include "schedules/error.h"

namespace stagecraft::schedules {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

enum Kind { kFwd = 0, kBwd = 1, kWgt = 2 };  // priority order for ties: backward, forward, weight
int priority(Kind k) { return k == kBwd ? 0 : k == kFwd ? 1 : 2; }

struct Candidate {
  double start = kNever;
  double prio = 0;  // GreedyOptions::priority, 0 when unset
  Kind kind = kFwd;
  int stage = -1;
  int mb = -1;
  int rank = -1;
  bool better_than(const Candidate& o) const {
    if (start != o.start) return start < o.start;
    if (prio != o.prio) return prio < o.prio;
    if (priority(kind) != priority(o.kind)) return priority(kind) < priority(o.kind);
    if (mb != o.mb) return mb < o.mb;
    if (stage != o.stage) return kind == kFwd ? stage > o.stage : stage < o.stage;
    return rank < o.rank;
  }
};

class Greedy {
 public:
  explicit Greedy(const GreedyOptions& o) : o_(o), S_(o.num_stages), m_(o.microbatches) {
    size_t n = static_cast<size_t>(S_) * m_;
    f_end_.assign(n, kNever);
    b_end_.assign(n, kNever);
    w_end_.assign(n, kNever);
    free_at_.assign(static_cast<size_t>(o.ranks), 0.0);
    live_.assign(static_cast<size_t>(o.ranks), 0);
    f_start_.assign(n, kNever);
    b_start_.assign(n, kNever);
    w_start_.assign(n, kNever);
    present_.assign(static_cast<size_t>(o.ranks) * o.num_chains, 0);
    left_on_rank_.assign(static_cast<size_t>(o.ranks) * m_, -1);
    per_chain_ = S_ / o.num_chains;
    chain_mbs_.resize(static_cast<size_t>(o.num_chains));
    for (int mb = 0; mb < m_; ++mb) chain_mbs_[static_cast<size_t>(chain(mb))].push_back(mb);
    next_f_.assign(static_cast<size_t>(S_), 0);
    next_b_.assign(static_cast<size_t>(S_), 0);
    next_w_.assign(static_cast<size_t>(S_), 0);
  }

  Schedule run(GreedyTimes* times) {
    Schedule s = make_schedule(o_.name, o_.ranks, S_, m_, o_.placement, o_.stage_to_rank, o_.num_chains);
    size_t total = 0;
    for (int st = 0; st < S_; ++st) total += chain_mbs_[static_cast<size_t>(st / per_chain_)].size() * (o_.split_backward ? 3 : 2);
    for (size_t done = 0; done < total; ++done) {
      Candidate best;
      for (int st = 0; st < S_; ++st)
        for (Kind k : {kFwd, kBwd, kWgt}) {
          Candidate c = candidate(st, k);
          if (c.start < kNever && (best.start == kNever || c.better_than(best))) best = c;
        }
      if (best.start == kNever) stall(s);
      commit(best, s);
    }
    if (times) {
      times->f_start = f_start_;
      times->b_start = b_start_;
      times->w_start = w_start_;
      times->makespan = *std::max_element(free_at_.begin(), free_at_.end());
    }
    return s;
  }

 private:
  const GreedyOptions& o_;
  int S_, m_, per_chain_ = 1;
  std::vector<double> f_end_, b_end_, w_end_;  // (stage * m + mb) end times; kNever = not yet
  std::vector<double> f_start_, b_start_, w_start_;  // (stage * m + mb) start times; kNever = not yet
  std::vector<double> free_at_;                // (ranks) when each rank's stream is free
  std::vector<int> live_;                      // (ranks) stage activations held (forward run, not yet freed)
  std::vector<int> present_;                   // (ranks * chains) microbatches present on a rank
  std::vector<int> left_on_rank_;              // (ranks * m) stages of a microbatch still to free there; -1 = not entered
  std::vector<std::vector<int>> chain_mbs_;    // microbatches of each chain, in order
  std::vector<int> next_f_, next_b_, next_w_;  // (stages) index into the stage's chain list

  int chain(int mb) const { return o_.chain_of_microbatch.empty() ? 0 : o_.chain_of_microbatch[static_cast<size_t>(mb)]; }
  int rank_of(int st) const { return o_.stage_to_rank[static_cast<size_t>(st)]; }
  size_t key(int st, int mb) const { return static_cast<size_t>(st) * m_ + mb; }
  bool first_in_chain(int st) const { return st % per_chain_ == 0; }
  bool last_in_chain(int st) const { return st % per_chain_ == per_chain_ - 1; }
  double arrival(int from_stage, int to_stage, double t) const {
    return rank_of(from_stage) == rank_of(to_stage) ? t : t + o_.comm_s;
  }
  int stages_of_chain_on_rank(int r, int c) const {
    int n = 0;
    for (int k = 0; k < per_chain_; ++k) n += rank_of(c * per_chain_ + k) == r;
    return n;
  }

  Candidate candidate(int st, Kind k) const {
    Candidate c;
    const auto& mbs = chain_mbs_[static_cast<size_t>(st / per_chain_)];
    const std::vector<int>& next = k == kFwd ? next_f_ : k == kBwd ? next_b_ : next_w_;
    size_t idx = static_cast<size_t>(next[static_cast<size_t>(st)]);
    if (idx >= mbs.size()) return c;
    if (k == kWgt && !o_.split_backward) return c;
    int mb = mbs[idx], r = rank_of(st);
    double ready = 0;
    if (k == kFwd) {
      if (!first_in_chain(st)) {
        double t = f_end_[key(st - 1, mb)];
        if (t == kNever) return c;
        ready = arrival(st - 1, st, t);
      }
      size_t lk = static_cast<size_t>(r) * m_ + mb;
      int lim = o_.max_in_flight.empty() ? 0 : o_.max_in_flight[static_cast<size_t>(r)];
      if (left_on_rank_[lk] < 0 && lim > 0 && present_[static_cast<size_t>(r) * o_.num_chains + chain(mb)] >= lim) return c;
      if (!o_.max_live_stages.empty() && live_[static_cast<size_t>(r)] >= o_.max_live_stages[static_cast<size_t>(r)]) return c;
    } else if (k == kBwd) {
      double t = f_end_[key(st, mb)];
      if (t == kNever) return c;
      ready = t;
      if (!last_in_chain(st)) {
        double g = b_end_[key(st + 1, mb)];
        if (g == kNever) return c;
        ready = std::max(ready, arrival(st + 1, st, g));
      }
    } else {
      double t = b_end_[key(st, mb)];
      if (t == kNever) return c;
      ready = t;
    }
    c.start = std::max(ready, free_at_[static_cast<size_t>(r)]);
    c.kind = k;
    if (o_.priority) c.prio = o_.priority(k == kFwd ? Op::F : k == kWgt ? Op::W : o_.split_backward ? Op::I : Op::B, st, mb);
    c.stage = st;
    c.mb = mb;
    c.rank = r;
    return c;
  }

  void commit(const Candidate& c, Schedule& s) {
    size_t kk = key(c.stage, c.mb);
    auto& list = s.actions[static_cast<size_t>(c.rank)];
    double dur = 0;
    size_t lk = static_cast<size_t>(c.rank) * m_ + c.mb;
    size_t pk = static_cast<size_t>(c.rank) * o_.num_chains + chain(c.mb);
    bool frees = false;
    if (c.kind == kFwd) {
      dur = o_.f_s;
      f_end_[kk] = c.start + dur;
      f_start_[kk] = c.start;
      ++live_[static_cast<size_t>(c.rank)];
      ++next_f_[static_cast<size_t>(c.stage)];
      list.push_back(Action::make(c.stage, Op::F, c.mb));
      if (left_on_rank_[lk] < 0) {
        left_on_rank_[lk] = stages_of_chain_on_rank(c.rank, chain(c.mb));
        ++present_[pk];
      }
    } else if (c.kind == kBwd) {
      dur = o_.split_backward ? o_.i_s : o_.b_s;
      b_end_[kk] = c.start + dur;
      b_start_[kk] = c.start;
      ++next_b_[static_cast<size_t>(c.stage)];
      list.push_back(Action::make(c.stage, o_.split_backward ? Op::I : Op::B, c.mb));
      frees = !o_.split_backward;
    } else {
      dur = o_.w_s;
      w_end_[kk] = c.start + dur;
      w_start_[kk] = c.start;
      ++next_w_[static_cast<size_t>(c.stage)];
      list.push_back(Action::make(c.stage, Op::W, c.mb));
      frees = true;
    }
    free_at_[static_cast<size_t>(c.rank)] = c.start + dur;
    if (frees) --live_[static_cast<size_t>(c.rank)];
    if (frees && --left_on_rank_[lk] == 0) --present_[pk];
  }

  [[noreturn]] void stall(const Schedule& s) const {
    std::string who;
    for (int r = 0; r < o_.ranks; ++r)
      who += " rank " + std::to_string(r) + " after " + std::to_string(s.actions[static_cast<size_t>(r)].size()) +
             " actions, " + std::to_string(present_[static_cast<size_t>(r) * o_.num_chains]) + " microbatches present;";
    throw Error("greedy scheduler for '" + o_.name + "' stalled (in-flight limits too small for the placement?):" + who);
  }
};

}  // namespace

double GreedyTimes::at(Op op, int stage, int mb, int m) const {
  size_t k = static_cast<size_t>(stage) * m + mb;
  return op == Op::F ? f_start.at(k) : op == Op::W ? w_start.at(k) : b_start.at(k);
}

Schedule greedy_schedule(const GreedyOptions& opt, GreedyTimes* times) {
  if (static_cast<int>(opt.stage_to_rank.size()) != opt.num_stages)
    throw InputError("greedy scheduler: stage_to_rank has " + std::to_string(opt.stage_to_rank.size()) + " entries for " +
                     std::to_string(opt.num_stages) + " stages");
  if (!opt.chain_of_microbatch.empty() && static_cast<int>(opt.chain_of_microbatch.size()) != opt.microbatches)
    throw InputError("greedy scheduler: chain_of_microbatch needs one entry per microbatch");
  if (!opt.max_in_flight.empty() && static_cast<int>(opt.max_in_flight.size()) != opt.ranks)
    throw InputError("greedy scheduler: max_in_flight needs one entry per rank");
  if (!opt.max_live_stages.empty() && static_cast<int>(opt.max_live_stages.size()) != opt.ranks)
    throw InputError("greedy scheduler: max_live_stages needs one entry per rank");
  return Greedy(opt).run(times);
}

}  // namespace stagecraft::schedules
