// The one ledger of predicted memory: the bytes each memory event of the schedule IR
// (schedules/memory_events.h) moves under a cost table, and the walk over one rank's timed
// events that gives its peaks (the runtime measures real allocations: runtime/memory_ledger.h). The evaluator and the simulator both call walk_memory with
// their own times, so their per-rank peaks are the same function of those times.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "costmodel/costs.h"
#include "schedules/memory_events.h"

namespace stagecraft::costmodel {

struct MemoryDelta {
  double gpu_bytes = 0;   // change of the rank's activation bytes on the GPU
  double host_bytes = 0;  // change of its offloaded bytes in host memory
};

// What one event moves (costs.h: kept_activation_bytes, recompute_activation_bytes,
// backward_freed_bytes, split_input_freed_bytes, split_weight_freed_bytes, work_bytes).
MemoryDelta memory_delta(const StageCost& sc, const schedules::MemoryEvent& e);

struct MemoryPeak {
  double gpu_bytes = 0;   // largest activation bytes on the GPU (static bytes not included)
  double host_bytes = 0;  // largest offloaded bytes
};

// One rank's events of its compute stream (`compute`, in list order) and of its copy stream
// (`copy`, in list order), each stream's events in time order; time_c(i) and time_y(i) give
// the time of event i of each. The streams are merged in time, frees first at equal times (a
// compute-stream event before a copy-stream one otherwise); on_change(time_s, gpu_bytes) sees
// the GPU bytes after every event.
template <class TimeC, class TimeY, class OnChange>
MemoryPeak walk_memory(const std::vector<StageCost>& stages, const std::vector<schedules::MemoryEvent>& compute, TimeC time_c,
                       const std::vector<schedules::MemoryEvent>& copy, TimeY time_y, OnChange on_change) {
  MemoryPeak peak;
  double gpu = 0, host = 0;
  size_t i = 0, j = 0;
  while (i < compute.size() || j < copy.size()) {
    bool take_c = j >= copy.size();
    if (i < compute.size() && j < copy.size()) {
      const double tc = time_c(i), ty = time_y(j);
      take_c = tc < ty || (tc == ty && (schedules::frees(compute[i].effect) || !schedules::frees(copy[j].effect)));
    }
    const double t = take_c ? time_c(i) : time_y(j);
    const schedules::MemoryEvent& e = take_c ? compute[i++] : copy[j++];
    const MemoryDelta d = memory_delta(stages[static_cast<size_t>(e.stage)], e);
    gpu += d.gpu_bytes;
    host += d.host_bytes;
    on_change(t, gpu);
    peak.gpu_bytes = std::max(peak.gpu_bytes, gpu);
    peak.host_bytes = std::max(peak.host_bytes, host);
  }
  return peak;
}

// Per rank, its peak memory (static bytes included) known without a timeline, where no rank has
// a copy-stream event: each rank's events then run in list order on its one compute stream, so
// the walk in list order is exactly what the evaluator and the simulator report (the planner
// drops what cannot fit before compiling an evaluator). Empty where a rank offloads or reloads
// (the copy stream's times decide).
std::vector<double> untimed_peak_memory_bytes(const schedules::Schedule& s, const CostTable& c);

// untimed_peak_memory_bytes for many cost tables of one schedule (a planner's points of one
// shape): the events reduced once to their distinct (stage, effect, fraction) terms, so that each
// table prices a few terms and walks an index list.
class UntimedMemory {
 public:
  explicit UntimedMemory(const schedules::Schedule& s);
  std::vector<double> peaks(const CostTable& c) const;  // as untimed_peak_memory_bytes

 private:
  bool copies_ = false;                              // a rank offloads: no untimed peak
  std::vector<schedules::MemoryEvent> terms_;        // the distinct terms
  std::vector<std::vector<std::uint32_t>> ranks_;    // (ranks) each event's term, list order
};

// The most microbatches a rank holds (weighted by StageCost::weight), its events in list order.
double peak_microbatches_held(const std::vector<StageCost>& stages, const std::vector<schedules::MemoryEvent>& events);

}  // namespace stagecraft::costmodel
