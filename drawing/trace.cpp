#include "drawing/trace.h"

namespace stagecraft::drawing {

using schedules::Action;
using schedules::Op;

std::string_view stream_name(Stream s) {
  switch (s) {
    case Stream::Compute: return "compute";
    case Stream::P2P: return "p2p send";
    case Stream::Collective: return "dp collective";
    case Stream::Copy: return "host copy";
  }
  return "?";
}

nlohmann::json chrome_trace(const schedules::Schedule& s, const EvalResult& r, const TraceOptions& opt) {
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < s.num_ranks; ++rank) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"sort_index", rank}}}});
    for (Stream st : {Stream::Compute, Stream::P2P, Stream::Collective, Stream::Copy})
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", static_cast<int>(st)},
                        {"args", {{"name", std::string(stream_name(st))}}}});
  }
  int last = 0;
  for (const Span& sp : r.spans) last = std::max(last, sp.iteration);
  for (const Span& sp : r.spans) {
    if (opt.last_iteration_only && sp.iteration != last) continue;
    const Action& a = s.actions[static_cast<size_t>(sp.rank)][static_cast<size_t>(sp.position)];
    std::string name = schedules::to_text(a);
    if (a.op == Op::OPTIMIZER && sp.stream == Stream::Collective) name = "gather params";  // distributed optimizer
    if (a.op == Op::SEND_F || a.op == Op::SEND_B) {
      int peer = a.op == Op::SEND_F ? s.next_stage(a.stage) : s.prev_stage(a.stage);
      name += " -> rank " + std::to_string(s.rank_of(peer));
    }
    nlohmann::json args = {{"iteration", sp.iteration}, {"op", std::string(schedules::op_name(a.op))}, {"step", sp.position}};
    if (a.stage >= 0) args["stage"] = a.stage;
    if (a.microbatch >= 0) args["microbatch"] = a.microbatch;
    events.push_back({{"name", name},
                      {"cat", std::string(schedules::op_name(a.op))},
                      {"ph", "X"},
                      {"pid", sp.rank},
                      {"tid", static_cast<int>(sp.stream)},
                      {"ts", sp.start_s * 1e6},
                      {"dur", (sp.end_s - sp.start_s) * 1e6},
                      {"args", args}});
  }
  // The memory counter track of each rank, as the runtime's trace has it (predicted here: static
  // bytes plus activations, the last iteration).
  for (size_t rank = 0; rank < r.memory_timeline.size(); ++rank)
    for (const auto& [t_s, bytes] : r.memory_timeline[rank])
      events.push_back({{"name", "memory"}, {"ph", "C"}, {"pid", static_cast<int>(rank)}, {"ts", t_s * 1e6},
                        {"args", {{"predicted (MiB)", bytes / (1024.0 * 1024.0)}}}});
  nlohmann::json meta = {{"schedule", s.name}, {"title", opt.title}, {"iteration_time_s", r.iteration_time_s},
                         {"time_unit", "microseconds (unit costs: 1 unit = 1 s)"}};
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"metadata", meta}};
}

}  // namespace stagecraft::drawing
