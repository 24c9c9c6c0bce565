// One configuration on the SimGrid simulator (`simulate`, docs/sim.md): the request resolved,
// priced by the evaluator, then simulated, nominally or under its what-ifs (docs/whatif.md).
// Built only with the simulator (STAGECRAFT_BUILD_SIM).
#pragma once

#include "costmodel/estimate.h"
#include "sim/simulate.h"
#include "sim/whatif.h"
#include "workbench/from.h"
#include "workbench/request.h"
#include "workbench/resolve.h"

namespace stagecraft::workbench {

struct Simulation {
  Inputs in;                        // the request resolved
  sim::SimOptions options;          // what the simulator ran with
  costmodel::Estimate evaluated;    // the evaluator's estimate of the plan
  costmodel::Estimate simulated;    // the same with the simulated iteration
  sim::SimResult result;            // the simulation itself
  sim::WhatIf whatif;               // the what-ifs (empty: none)
  sim::WhatIfResult whatif_result;  // their iterations summarised, when there are any
};

// The what-if of the file and the flags together (the flags' entries after the file's);
// InputError naming the flag, the value and the form allowed.
sim::WhatIf whatif_of(const SimulateRequest& q);

// The request resolved (its --from warnings through `warn`), evaluated and simulated.
Simulation simulate(const SimulateRequest& q, const WarnFn& warn = {});

}  // namespace stagecraft::workbench
