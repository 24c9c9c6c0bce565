#include "schedules/memory_events.h"

#include <cmath>

namespace stagecraft::schedules {
namespace {

using E = MemoryEffect;

// Per (stage, microbatch): the recompute share its R gives and whether that R is fused.
struct RecomputeMarks {
  int microbatches = 0;
  std::vector<double> fraction;
  std::vector<char> fused;
  size_t key(int stage, int mb) const { return static_cast<size_t>(stage) * microbatches + mb; }
};

RecomputeMarks recompute_marks(const Schedule& s) {
  RecomputeMarks m;
  m.microbatches = s.num_microbatches;
  const size_t keys = static_cast<size_t>(s.num_stages) * s.num_microbatches;
  m.fraction.assign(keys, 0.0);
  m.fused.assign(keys, 0);
  for (const auto& list : s.actions)
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].op == Op::R) {
        m.fraction[m.key(list[i].stage, list[i].microbatch)] = list[i].fraction;
        if (recompute_fused_with_backward(list, i)) m.fused[m.key(list[i].stage, list[i].microbatch)] = 1;
      }
  return m;
}

// A backward's events on `stage`: its working set while it runs, then its frees.
void backward_events(std::vector<MemoryEvent>& out, const RecomputeMarks& rm, int pos, int stage, int mb, Op op) {
  out.push_back({pos, stage, E::WorkStart, false, false, 0});
  out.push_back({pos, stage, E::WorkEnd, true, false, 0});
  if (op == Op::I) {
    out.push_back({pos, stage, E::FreeInput, true, false, 0});
    return;
  }
  const size_t k = rm.key(stage, mb);
  if (rm.fused[k]) out.push_back({pos, stage, E::FreeFused, true, false, rm.fraction[k]});
  else out.push_back({pos, stage, E::Free, true, false, 0});
}

void action_events(std::vector<MemoryEvent>& out, const RecomputeMarks& rm, const Action& a, int pos) {
  auto fr = [&](int st, int mb) { return rm.fraction[rm.key(st, mb)]; };
  switch (a.op) {
    case Op::F: out.push_back({pos, a.stage, E::StoreForward, false, false, fr(a.stage, a.microbatch)}); break;
    case Op::R: {
      const bool fused = rm.fused[rm.key(a.stage, a.microbatch)] != 0;
      out.push_back({pos, a.stage, fused ? E::RestoreLayer : E::RestoreRecompute, false, false, a.fraction});
      break;
    }
    case Op::B: case Op::I: backward_events(out, rm, pos, a.stage, a.microbatch, a.op); break;
    case Op::W: out.push_back({pos, a.stage, E::FreeWeight, true, false, 0}); break;
    case Op::OVERLAP_F_B:
      if (a.stage == a.b_stage) {  // one stage's layers, the forward up while the backward comes down
        backward_events(out, rm, pos, a.b_stage, a.b_microbatch, a.b_op);
        out.push_back({pos, a.stage, E::StoreForward, true, false, fr(a.stage, a.microbatch)});
        break;
      }
      out.push_back({pos, a.stage, E::StoreForward, false, false, fr(a.stage, a.microbatch)});
      backward_events(out, rm, pos, a.b_stage, a.b_microbatch, a.b_op);
      break;
    case Op::OFFLOAD: out.push_back({pos, a.stage, E::OffloadEnd, true, true, fr(a.stage, a.microbatch)}); break;
    case Op::RELOAD:
      out.push_back({pos, a.stage, E::ReloadStart, false, true, fr(a.stage, a.microbatch)});
      out.push_back({pos, a.stage, E::ReloadEnd, true, true, fr(a.stage, a.microbatch)});
      break;
    default: break;
  }
}

}  // namespace

bool frees(MemoryEffect e) {
  return e == E::Free || e == E::FreeFused || e == E::FreeInput || e == E::FreeWeight || e == E::OffloadEnd ||
         e == E::ReloadEnd || e == E::WorkEnd;
}

int held_change(MemoryEffect e) {
  switch (e) {
    case E::StoreForward: case E::ReloadStart: return +1;
    case E::Free: case E::FreeFused: case E::FreeWeight: case E::OffloadEnd: return -1;
    default: return 0;
  }
}

bool recompute_fused_with_backward(const std::vector<Action>& list, size_t r_index) {
  const Action& r = list[r_index];
  size_t j = r_index + 1;
  while (j < list.size() && (list[j].op == Op::SEND_F || list[j].op == Op::SEND_B)) ++j;
  if (j == list.size()) return false;
  const Action& b = list[j];
  if (b.op == Op::B) return b.stage == r.stage && b.microbatch == r.microbatch;
  return b.op == Op::OVERLAP_F_B && b.b_op == Op::B && b.b_stage == r.stage && b.b_microbatch == r.microbatch;
}

int recomputed_layers(double fraction, int layers) { return static_cast<int>(std::lround(fraction * layers)); }

std::vector<std::vector<MemoryEvent>> memory_events(const Schedule& s) {
  const RecomputeMarks rm = recompute_marks(s);
  std::vector<std::vector<MemoryEvent>> out(s.actions.size());
  for (size_t r = 0; r < s.actions.size(); ++r) {
    const auto& list = s.actions[r];
    for (size_t i = 0; i < list.size(); ++i) action_events(out[r], rm, list[i], static_cast<int>(i));
  }
  return out;
}

}  // namespace stagecraft::schedules
