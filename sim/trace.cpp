#include "sim/trace.h"

#include <set>
#include <string>

namespace stagecraft::sim {

nlohmann::json sim_trace(const schedules::Schedule& s, const SimResult& r, const drawing::TraceOptions& opt) {
  nlohmann::json t = drawing::chrome_trace(s, r.eval, opt);
  auto& events = t["traceEvents"];
  const int pid = s.num_ranks;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                    {"args", {{"name", "network (flows by source GPU, last iteration)"}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  std::set<int> named;
  for (const NetSpan& n : r.net_spans) {
    const int tid = n.src_gpu >= 0 ? n.src_gpu : r.num_gpus;  // host memory: one extra thread
    if (named.insert(tid).second)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"name", n.src_gpu >= 0 ? "gpu " + std::to_string(n.src_gpu) : std::string("host memory")}}}});
    std::string to = n.dst_gpu >= 0 ? "gpu " + std::to_string(n.dst_gpu) : "host";
    events.push_back({{"name", std::string(comm_kind_name(n.kind)) + " -> " + to},
                      {"cat", std::string(comm_kind_name(n.kind))},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", n.start_s * 1e6},
                      {"dur", (n.end_s - n.start_s) * 1e6},
                      {"args", {{"bytes", n.bytes}, {"iteration", n.iteration}}}});
  }
  t["metadata"]["engine"] = "simgrid";
  return t;
}

}  // namespace stagecraft::sim
