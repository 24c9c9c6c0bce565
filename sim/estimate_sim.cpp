#include <algorithm>

#include "sim/simulate.h"

namespace stagecraft::sim {

costmodel::Estimate simulated_estimate(const costmodel::Estimate& e, const SimOptions& opt, SimResult* out) {
  SimResult r = simulate(e.schedule, e.costs, e.cluster, e.plan, opt);
  costmodel::Estimate s = e;
  s.eval = r.eval;
  costmodel::set_rates(s);
  s.max_memory_bytes = r.eval.peak_memory_bytes.empty()
                           ? 0 : *std::max_element(r.eval.peak_memory_bytes.begin(), r.eval.peak_memory_bytes.end());
  s.fits = s.max_memory_bytes <= e.cluster.gpu_memory_bytes;
  if (out) *out = std::move(r);
  return s;
}

}  // namespace stagecraft::sim
