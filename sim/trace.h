// Chrome trace of a simulation: the evaluator's layout (one process per pipeline rank, one
// thread per stream, data-parallel replica 0) plus a "network" process with one thread per
// source GPU holding every flow of the last iteration, so the evaluator's and the simulator's
// traces open side by side in Perfetto.
#pragma once

#include <nlohmann/json.hpp>

#include "drawing/trace.h"
#include "sim/simulate.h"

namespace stagecraft::sim {

nlohmann::json sim_trace(const schedules::Schedule& s, const SimResult& r, const drawing::TraceOptions& opt = {});

}  // namespace stagecraft::sim
