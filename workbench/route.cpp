#include "workbench/route.h"

#include "graphs/estimate.h"
#include "schedules/error.h"
#ifdef STAGECRAFT_HAVE_SIM
#include "sim/simulate.h"
#endif

namespace stagecraft::workbench {

costmodel::Estimate estimate_inputs(const Inputs& in, const costmodel::ParallelPlan& p, const costmodel::EstimateOptions& eo) {
  return in.graph ? graphs::estimate_graph(*in.graph, in.cluster, p, eo) : costmodel::estimate(in.model, in.cluster, p, eo);
}

void check_engine(const std::string& engine) {
#ifdef STAGECRAFT_HAVE_SIM
  if (engine == "eval" || engine == "sim") return;
  throw InputError("--engine = '" + engine + "' is not available (allowed: eval, sim)");
#else
  if (engine == "eval") return;
  throw InputError("--engine = '" + engine + "' is not available (allowed: eval; sim needs a build with STAGECRAFT_BUILD_SIM)");
#endif
}

costmodel::Estimate with_engine(const costmodel::Estimate& e, const std::string& engine) {
#ifdef STAGECRAFT_HAVE_SIM
  if (engine == "sim") return sim::simulated_estimate(e);
#else
  (void)engine;
#endif
  return e;
}

SimulateFn simulator() {
#ifdef STAGECRAFT_HAVE_SIM
  return [](const costmodel::Estimate& e) { return sim::simulated_estimate(e); };
#else
  return {};
#endif
}

}  // namespace stagecraft::workbench
