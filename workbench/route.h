// The route an estimate takes: the analytic cost model (costmodel/estimate.h) or, for a graph
// model, the graph's (graphs/estimate.h); and the engine that times it: the evaluator (eval) or
// the SimGrid simulator (sim). A plan search's route: workbench/search.h, search_route.
#pragma once

#include <functional>
#include <string>

#include "costmodel/estimate.h"
#include "workbench/resolve.h"

namespace stagecraft::workbench {

// costmodel::estimate, or the graph route (graphs/estimate.h) when the inputs hold a graph.
costmodel::Estimate estimate_inputs(const Inputs& in, const costmodel::ParallelPlan& p, const costmodel::EstimateOptions& eo);

// --engine checked before any row is priced: eval, or sim in a build with the simulator;
// InputError naming the flag otherwise.
void check_engine(const std::string& engine);
// `e` as the engine times it: itself (eval) or simulated (sim; sim::simulated_estimate).
costmodel::Estimate with_engine(const costmodel::Estimate& e, const std::string& engine);

// The simulator as a function of an estimate (an experiment's engine "sim", reproduce/run.h's
// SimulateFn); empty in a build without it.
using SimulateFn = std::function<costmodel::Estimate(const costmodel::Estimate&)>;
SimulateFn simulator();

}  // namespace stagecraft::workbench
