// Chrome trace (the JSON Perfetto and chrome://tracing open) of an evaluated schedule: one
// process per rank, one thread per stream (compute, p2p, collective, copy), one complete
// event per action. The simulator and the runtime write the same layout.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/evaluator.h"

namespace stagecraft::drawing {

using costmodel::EvalResult;
using costmodel::Span;
using costmodel::Stream;

struct TraceOptions {
  std::string title;          // written into the trace's metadata
  bool last_iteration_only = false;  // drop earlier iterations (times still absolute)
};

nlohmann::json chrome_trace(const schedules::Schedule& s, const EvalResult& r, const TraceOptions& opt = {});
std::string_view stream_name(Stream s);

}  // namespace stagecraft::drawing
