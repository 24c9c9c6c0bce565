// From simulated activities to the results: iteration time (steady state), compute and idle
// per rank, bubbles, exposed communication per kind, peak memory, link utilisation, spans for
// traces. Internal to sim/.
#pragma once

#include <map>
#include <string>

#include "costmodel/costs.h"
#include "sim/executor.h"
#include "sim/simulate.h"

namespace stagecraft::sim {

struct LinkLoad {        // one link, filled from the platform's routes
  double bandwidth_Bps = 0;
  double bytes = 0;      // carried in the reported iteration
};

SimResult summarise(const schedules::Schedule& s, const costmodel::CostTable& c, const Execution& ex,
                    const std::map<std::string, LinkLoad>& links, const SimOptions& opt);

}  // namespace stagecraft::sim
