#include <algorithm>

#include "sim/simulate.h"

namespace stagecraft::sim {

costmodel::Estimate with_simulation(const costmodel::Estimate& e, const SimResult& r) {
  costmodel::Estimate s = e;
  s.eval = r.eval;
  costmodel::set_rates(s);
  costmodel::set_fit(s);
  return s;
}

costmodel::Estimate simulated_estimate(const costmodel::Estimate& e, const SimOptions& opt, SimResult* out) {
  SimResult r = simulate(e.schedule, e.costs, e.cluster, e.plan, opt);
  costmodel::Estimate s = with_simulation(e, r);
  if (out) *out = std::move(r);
  return s;
}

}  // namespace stagecraft::sim
