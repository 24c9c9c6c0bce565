#include "costmodel/memory_walk.h"

#include <map>
#include <tuple>

namespace stagecraft::costmodel {

using schedules::MemoryEffect;

MemoryDelta memory_delta(const StageCost& sc, const schedules::MemoryEvent& e) {
  const double stored = kept_activation_bytes(sc, e.fraction);
  switch (e.effect) {
    case MemoryEffect::StoreForward: return {stored, 0};
    case MemoryEffect::RestoreRecompute: return {recompute_activation_bytes(sc, e.fraction, false), 0};
    case MemoryEffect::RestoreLayer: return {recompute_activation_bytes(sc, e.fraction, true), 0};
    case MemoryEffect::Free: return {-backward_freed_bytes(sc, e.fraction, false), 0};
    case MemoryEffect::FreeFused: return {-backward_freed_bytes(sc, e.fraction, true), 0};
    case MemoryEffect::FreeInput: return {-split_input_freed_bytes(sc), 0};
    case MemoryEffect::FreeWeight: return {-split_weight_freed_bytes(sc), 0};
    case MemoryEffect::OffloadEnd: return {-stored, stored};
    case MemoryEffect::ReloadStart: return {stored, 0};
    case MemoryEffect::ReloadEnd: return {0, -stored};
    case MemoryEffect::WorkStart: return {sc.work_bytes, 0};
    case MemoryEffect::WorkEnd: return {-sc.work_bytes, 0};
  }
  return {};
}

std::vector<double> untimed_peak_memory_bytes(const schedules::Schedule& s, const CostTable& c) {
  return UntimedMemory(s).peaks(c);
}

UntimedMemory::UntimedMemory(const schedules::Schedule& s) {
  std::map<std::tuple<int, int, double>, std::uint32_t> index;  // (stage, effect, fraction) -> term
  for (const auto& list : schedules::memory_events(s)) {
    ranks_.emplace_back();
    for (const schedules::MemoryEvent& e : list) {
      copies_ = copies_ || e.copy;
      auto [it, fresh] = index.try_emplace({e.stage, static_cast<int>(e.effect), e.fraction}, static_cast<std::uint32_t>(terms_.size()));
      if (fresh) terms_.push_back(e);
      ranks_.back().push_back(it->second);
    }
  }
}

// The list-order walk (walk_memory with no copy stream, each event at its index), each event's
// delta priced once per term.
std::vector<double> UntimedMemory::peaks(const CostTable& c) const {
  if (copies_) return {};
  std::vector<double> delta(terms_.size());
  for (size_t i = 0; i < terms_.size(); ++i) delta[i] = memory_delta(c.stages[static_cast<size_t>(terms_[i].stage)], terms_[i]).gpu_bytes;
  std::vector<double> out;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    double gpu = 0, peak = 0;
    for (std::uint32_t t : ranks_[r]) peak = std::max(peak, gpu += delta[t]);
    out.push_back(c.static_bytes[r] + peak);
  }
  return out;
}

double peak_microbatches_held(const std::vector<StageCost>& stages, const std::vector<schedules::MemoryEvent>& events) {
  double cur = 0, peak = 0;
  for (const schedules::MemoryEvent& e : events) {
    const int d = schedules::held_change(e.effect);
    if (d == 0) continue;
    cur += d * stages[static_cast<size_t>(e.stage)].weight;
    peak = std::max(peak, cur);
  }
  return peak;
}

}  // namespace stagecraft::costmodel
