#include "schedules/lower.h"

#include <algorithm>

#include "schedules/error.h"

namespace stagecraft::schedules {

std::string_view grad_reduce_at_name(GradReduceAt a) {
  switch (a) {
    case GradReduceAt::Auto: return "auto";
    case GradReduceAt::RankEnd: return "rank-end";
    case GradReduceAt::StageEnd: return "stage-end";
  }
  return "?";
}

GradReduceAt parse_grad_reduce_at(std::string_view s, const std::string& field) {
  for (GradReduceAt a : {GradReduceAt::Auto, GradReduceAt::RankEnd, GradReduceAt::StageEnd})
    if (s == grad_reduce_at_name(a)) return a;
  throw InputError(field + " = '" + std::string(s) + "' is invalid (allowed: auto, rank-end, stage-end)");
}

namespace {

// The peer is left implied (-1): within a chain it is always the adjacent stage, and the text
// form then reads as PyTorch writes it ("1SEND_F3").
Action p2p(int stage, Op op, int mb, int /*peer*/) { return Action::make(stage, op, mb); }

// Receives and sends one compute action needs, for one (stage, microbatch, forward?) part.
void comm_for(const Schedule& s, int rank, int stage, int mb, bool forward, std::vector<Action>& recvs,
              std::vector<Action>& sends) {
  if (forward) {
    int pv = s.prev_stage(stage), nx = s.next_stage(stage);
    if (pv >= 0 && s.rank_of(pv) != rank) recvs.push_back(p2p(stage, Op::RECV_F, mb, pv));
    if (nx >= 0 && s.rank_of(nx) != rank) sends.push_back(p2p(stage, Op::SEND_F, mb, nx));
  } else {
    int pv = s.prev_stage(stage), nx = s.next_stage(stage);
    if (nx >= 0 && s.rank_of(nx) != rank) recvs.push_back(p2p(stage, Op::RECV_B, mb, nx));
    if (pv >= 0 && s.rank_of(pv) != rank) sends.push_back(p2p(stage, Op::SEND_B, mb, pv));
  }
}

// True when the next compute action after the R at `i` is the backward (B or I, or the
// OVERLAP_F_B carrying it) of the same stage and microbatch.
bool r_feeds_next_backward(const std::vector<Action>& in, size_t i) {
  const Action& r = in[i];
  for (size_t j = i + 1; j < in.size(); ++j) {
    const Action& a = in[j];
    if (!is_compute(a.op)) continue;
    if ((a.op == Op::B || a.op == Op::I) && a.stage == r.stage && a.microbatch == r.microbatch) return true;
    if (a.op == Op::OVERLAP_F_B && a.b_stage == r.stage && a.b_microbatch == r.microbatch) return true;
    return false;
  }
  return false;
}

std::vector<Action> lower_p2p(const Schedule& s, int rank, const std::vector<Action>& in, int lookahead, bool late_recompute) {
  std::vector<Action> out;
  out.reserve(in.size() * 2);
  std::vector<size_t> compute_pos;  // positions in `out` of compute actions, for lookahead
  std::vector<bool> grad_posted(static_cast<size_t>(s.num_stages) * s.num_microbatches, false);
  auto posted = [&](int st, int mb) { return grad_posted[static_cast<size_t>(st) * s.num_microbatches + mb]; };
  for (size_t idx = 0; idx < in.size(); ++idx) {
    const Action& a = in[idx];
    std::vector<Action> recvs, sends;
    if (a.op == Op::F) comm_for(s, rank, a.stage, a.microbatch, true, recvs, sends);
    if ((a.op == Op::B || a.op == Op::I) && !posted(a.stage, a.microbatch))
      comm_for(s, rank, a.stage, a.microbatch, false, recvs, sends);
    else if (a.op == Op::B || a.op == Op::I) {
      std::vector<Action> unused;
      comm_for(s, rank, a.stage, a.microbatch, false, unused, sends);
    }
    if (a.op == Op::R && late_recompute && r_feeds_next_backward(in, idx)) {
      std::vector<Action> unused;
      comm_for(s, rank, a.stage, a.microbatch, false, recvs, unused);
      grad_posted[static_cast<size_t>(a.stage) * s.num_microbatches + a.microbatch] = true;
    }
    if (a.op == Op::OVERLAP_F_B) {
      comm_for(s, rank, a.stage, a.microbatch, true, recvs, sends);
      if (!posted(a.b_stage, a.b_microbatch)) comm_for(s, rank, a.b_stage, a.b_microbatch, false, recvs, sends);
      else {
        std::vector<Action> unused;
        comm_for(s, rank, a.b_stage, a.b_microbatch, false, unused, sends);
      }
    }
    if (!recvs.empty()) {
      size_t at = out.size();
      int back = std::min<int>(lookahead, static_cast<int>(compute_pos.size()));
      if (back > 0) at = compute_pos[compute_pos.size() - static_cast<size_t>(back)];
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), recvs.begin(), recvs.end());
      for (size_t& p : compute_pos)
        if (p >= at) p += recvs.size();
    }
    if (is_compute(a.op)) compute_pos.push_back(out.size());
    out.push_back(a);
    out.insert(out.end(), sends.begin(), sends.end());
  }
  return out;
}

}  // namespace

Schedule lower(const Schedule& in, const LowerOptions& opt) {
  check_shape(in);
  int lookahead = opt.recv_lookahead;
  if (lookahead < 0) {
    const auto& v = in.params.contains("recv_lookahead") ? in.params["recv_lookahead"] : nlohmann::json(0);
    if (!v.is_number_integer() || v.get<int>() < 0)
      throw InputError("schedule '" + in.name + "': params.recv_lookahead = " + v.dump() + " is invalid (must be an integer >= 0)");
    lookahead = v.get<int>();
  }
  std::string timing = in.params.value("recompute_timing", std::string("late"));
  if (timing != "late" && timing != "early")
    throw InputError("schedule '" + in.name + "': params.recompute_timing = \"" + timing + "\" is invalid (allowed: late, early)");
  Schedule s = in;
  if (!in.is_lowered())
    for (int r = 0; r < s.num_ranks; ++r)
      s.actions[static_cast<size_t>(r)] = lower_p2p(s, r, in.actions[static_cast<size_t>(r)], lookahead, timing == "late");

  const bool rank_end = opt.reduce_at == GradReduceAt::RankEnd ||
                        (opt.reduce_at == GradReduceAt::Auto && !in.params.value("eager_grad_reduce", false));
  for (int r = 0; r < s.num_ranks; ++r) {
    auto& list = s.actions[static_cast<size_t>(r)];
    if (opt.insert_reduce_grad) {
      // At the rank's end, in model order: ranks holding copies of a stage (Chimera) then issue
      // the reductions they share in the same order.
      std::vector<int> stages = s.stages_of(r);
      if (rank_end)
        std::stable_sort(stages.begin(), stages.end(), [&](int a, int b) { return s.model_part(a) < s.model_part(b); });
      for (int st : stages) {
        bool placed = std::any_of(list.begin(), list.end(),
                                  [&](const Action& a) { return a.op == Op::REDUCE_GRAD && a.stage == st; });
        if (placed) continue;
        // After the last B or W of the stage (of any stage of the rank with reduce_at_rank_end)
        // and the sends that follow it.
        int last = -1, last_any = -1;
        for (int i = 0; i < static_cast<int>(list.size()); ++i) {
          const Action& a = list[static_cast<size_t>(i)];
          const bool bwd = a.op == Op::B || a.op == Op::W || a.op == Op::OVERLAP_F_B;
          if (bwd && (a.op == Op::OVERLAP_F_B ? a.b_stage : a.stage) == st) last = i;
          if (bwd) last_any = i;
        }
        if (last < 0) continue;  // no backward on this stage: validator will say so
        if (rank_end) last = last_any;
        const Action& b = list[static_cast<size_t>(last)];
        const int sender = b.op == Op::OVERLAP_F_B ? b.b_stage : b.stage;
        size_t at = static_cast<size_t>(last) + 1;
        while (at < list.size() && ((list[at].op == Op::SEND_B && list[at].stage == sender) ||
                                    (rank_end && list[at].op == Op::REDUCE_GRAD)))
          ++at;
        list.insert(list.begin() + static_cast<std::ptrdiff_t>(at), Action::make(st, Op::REDUCE_GRAD));
      }
    }
    if (opt.insert_optimizer &&
        std::none_of(list.begin(), list.end(), [](const Action& a) { return a.op == Op::OPTIMIZER; }))
      list.push_back(Action::make(-1, Op::OPTIMIZER));
  }
  return s;
}

Schedule insert_recompute(const Schedule& in, const std::vector<double>& fraction) {
  if (static_cast<int>(fraction.size()) != in.num_stages)
    throw InputError("recompute fractions: " + std::to_string(fraction.size()) + " given, the schedule has " +
                     std::to_string(in.num_stages) + " stages");
  for (size_t i = 0; i < fraction.size(); ++i)
    if (!(fraction[i] >= 0 && fraction[i] <= 1))
      throw InputError("recompute fraction of stage " + std::to_string(i) + " = " + std::to_string(fraction[i]) +
                       " is outside [0, 1]");
  Schedule s = in;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& src = in.actions[static_cast<size_t>(r)];
    std::vector<bool> has_r(static_cast<size_t>(s.num_stages), false);
    for (const Action& a : src)
      if (a.op == Op::R) has_r[static_cast<size_t>(a.stage)] = true;
    std::vector<Action> out;
    out.reserve(src.size() * 2);
    for (const Action& a : src) {
      auto add_r = [&](int st, int mb) {
        double f = fraction[static_cast<size_t>(st)];
        if (f <= 0 || has_r[static_cast<size_t>(st)]) return;
        Action rc = Action::make(st, Op::R, mb);
        rc.fraction = f;
        out.push_back(rc);
      };
      if (a.op == Op::B || a.op == Op::I) add_r(a.stage, a.microbatch);
      if (a.op == Op::OVERLAP_F_B) add_r(a.b_stage, a.b_microbatch);
      out.push_back(a);
    }
    s.actions[static_cast<size_t>(r)] = std::move(out);
  }
  return s;
}

Schedule compute_only(const Schedule& in) {
  Schedule s = in;
  for (auto& list : s.actions)
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const Action& a) {
                                return is_p2p(a.op) || a.op == Op::REDUCE_GRAD || a.op == Op::OPTIMIZER;
                              }),
               list.end());
  return s;
}

}  // namespace stagecraft::schedules
