#include "schedules/buckets.h"

#include <algorithm>
#include <string>

#include "schedules/error.h"

namespace stagecraft::schedules {

namespace {
bool passes_over(const Action& a) { return a.op == Op::SEND_F || a.op == Op::SEND_B || a.op == Op::REDUCE_GRAD; }
bool backward_of(const Action& a, int stage) {
  return ((a.op == Op::B || a.op == Op::W) && a.stage == stage) || (a.op == Op::OVERLAP_F_B && a.b_stage == stage);
}
}  // namespace

int backward_before(const std::vector<Action>& list, int pos) {
  const int stage = list[static_cast<size_t>(pos)].stage;
  for (int i = pos - 1; i >= 0; --i) {
    const Action& a = list[static_cast<size_t>(i)];
    if (passes_over(a)) continue;
    return backward_of(a, stage) ? i : -1;
  }
  return -1;
}

std::vector<int> backwards_before(const std::vector<Action>& list) {
  std::vector<int> out(list.size(), -1);
  int other = -1;  // the last action so far that is not a send or a reduction
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.op == Op::REDUCE_GRAD && other >= 0 && backward_of(list[static_cast<size_t>(other)], a.stage)) out[i] = other;
    if (!passes_over(a)) other = static_cast<int>(i);
  }
  return out;
}

bool reduces_after_backward(const std::vector<Action>& list, int pos) { return backward_before(list, pos) >= 0; }

namespace {
bool computes(const Action& a, int stage) {
  if (a.op == Op::OVERLAP_F_B) return a.stage == stage || a.b_stage == stage;
  return is_compute(a.op) && a.op != Op::OPTIMIZER && a.stage == stage;
}
}  // namespace

std::vector<bool> deferred_reductions(const std::vector<Action>& list) {
  std::vector<bool> out(list.size(), false);
  std::vector<int> computed;  // stages with a compute action so far
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.op == Op::REDUCE_GRAD) out[i] = std::find(computed.begin(), computed.end(), a.stage) == computed.end();
    if (is_compute(a.op) && a.op != Op::OPTIMIZER) computed.push_back(a.stage);
    if (a.op == Op::OVERLAP_F_B) computed.push_back(a.b_stage);
  }
  return out;
}

int deferred_waiter(const std::vector<Action>& list, int pos) {
  const int stage = list[static_cast<size_t>(pos)].stage;
  for (size_t i = static_cast<size_t>(pos) + 1; i < list.size(); ++i)
    if (computes(list[i], stage)) return static_cast<int>(i);
  return -1;
}

Schedule bucket_reductions(const Schedule& s, const std::vector<int>& buckets) {
  if (static_cast<int>(buckets.size()) != s.num_stages)
    throw InputError("gradient buckets: " + std::to_string(buckets.size()) + " entries given, the schedule has " +
                     std::to_string(s.num_stages) + " stages");
  for (size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i] < 1)
      throw InputError("gradient buckets of stage " + std::to_string(i) + " = " + std::to_string(buckets[i]) +
                       " is invalid (must be at least 1)");
  Schedule out = s;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    std::vector<Action> next;
    next.reserve(list.size());
    const std::vector<int> bwd = backwards_before(list);
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<size_t>(i)];
      const int n = a.op == Op::REDUCE_GRAD ? buckets[static_cast<size_t>(a.stage)] : 1;
      if (n == 1 || a.early > 0 || bwd[static_cast<size_t>(i)] < 0) {
        next.push_back(a);
        continue;
      }
      for (int j = 0; j < n; ++j) {
        Action b = a;
        b.fraction = a.fraction / n;
        b.early = static_cast<double>(n - 1 - j) / n;
        next.push_back(b);
      }
    }
    out.actions[static_cast<size_t>(r)] = std::move(next);
  }
  return out;
}

}  // namespace stagecraft::schedules
