// SimResult to and from JSON: the CLI's --json output and the way a simulation's result
// travels from the forked simulating process back to the caller.
#include "sim/simulate.h"

#include "schedules/error.h"

namespace stagecraft::sim {

using nlohmann::json;

std::string_view comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::Pipeline: return "pipeline";
    case CommKind::DataParallel: return "data-parallel";
    case CommKind::TensorParallel: return "tensor-parallel";
    case CommKind::Copy: return "host-copy";
    case CommKind::ExpertParallel: return "expert-parallel";
    case CommKind::ContextParallel: return "context-parallel";
  }
  return "?";
}

namespace {

json link_json(const LinkUse& l) {
  return {{"name", l.name}, {"bandwidth_Bps", l.bandwidth_Bps}, {"bytes", l.bytes}, {"utilisation", l.utilisation}};
}
LinkUse link_from(const json& j) {
  return {j.at("name").get<std::string>(), j.at("bandwidth_Bps").get<double>(), j.at("bytes").get<double>(),
          j.at("utilisation").get<double>()};
}

}  // namespace

json to_json(const SimResult& r) {
  const auto& e = r.eval;
  json spans = json::array(), net = json::array(), top = json::array();
  for (const auto& s : e.spans) spans.push_back({s.rank, static_cast<int>(s.stream), s.iteration, s.position, s.start_s, s.end_s});
  for (const auto& n : r.net_spans)
    net.push_back({n.src_gpu, n.dst_gpu, static_cast<int>(n.kind), n.iteration, n.bytes, n.start_s, n.end_s});
  for (const auto& l : r.top_links) top.push_back(link_json(l));
  return {{"iteration_time_s", e.iteration_time_s},
          {"iteration_times_s", r.iteration_times_s},
          {"compute_s", e.compute_s},
          {"idle_s", e.idle_s},
          {"bubble_over_compute", e.bubble_over_compute},
          {"bubble_fraction", e.bubble_fraction},
          {"mean_idle_fraction", e.mean_idle_fraction},
          {"peak_activations", e.peak_activations},
          {"peak_activation_bytes", e.peak_activation_bytes},
          {"peak_memory_bytes", e.peak_memory_bytes},
          {"peak_host_bytes", e.peak_host_bytes},
          {"dp_comm_s", e.dp_comm_s},
          {"exposed_comm_s", {{"pipeline", r.exposed_pp_comm_s}, {"data_parallel", e.exposed_dp_comm_s},
                              {"tensor_parallel", r.exposed_tp_comm_s}, {"expert_parallel", r.exposed_ep_comm_s}}},
          {"busiest_link", link_json(r.busiest_link)},
          {"top_links", top},
          {"num_gpus", r.num_gpus},
          {"symmetry", {{"simulated_gpus", r.simulated_gpus}, {"dp_simulated", r.dp_simulated}, {"dp_copies", r.dp_copies},
                        {"dp_replicas", r.dp_replicas}, {"full_because", r.symmetry_off_because}}},
          {"activities", r.activities},
          {"sim_wall_s", r.sim_wall_s},
          {"events_per_s", r.events_per_s},
          {"wall_s", {{"setup", r.setup_s}, {"graph", r.graph_s}, {"engine", r.engine_s}, {"metrics", r.metrics_s}}},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"spans", spans},
          {"net_spans", net}};
}

SimResult sim_result_from_json(const json& j) {
  SimResult r;
  auto& e = r.eval;
  e.iteration_time_s = j.at("iteration_time_s");
  e.compute_s = j.at("compute_s").get<std::vector<double>>();
  e.idle_s = j.at("idle_s").get<std::vector<double>>();
  e.bubble_over_compute = j.at("bubble_over_compute");
  e.bubble_fraction = j.at("bubble_fraction");
  e.mean_idle_fraction = j.at("mean_idle_fraction");
  e.peak_activations = j.at("peak_activations").get<std::vector<double>>();
  e.peak_activation_bytes = j.at("peak_activation_bytes").get<std::vector<double>>();
  e.peak_memory_bytes = j.at("peak_memory_bytes").get<std::vector<double>>();
  e.peak_host_bytes = j.at("peak_host_bytes").get<std::vector<double>>();
  e.dp_comm_s = j.at("dp_comm_s").get<std::vector<double>>();
  const json& x = j.at("exposed_comm_s");
  r.exposed_pp_comm_s = x.at("pipeline").get<std::vector<double>>();
  e.exposed_dp_comm_s = x.at("data_parallel").get<std::vector<double>>();
  r.exposed_tp_comm_s = x.at("tensor_parallel").get<std::vector<double>>();
  r.exposed_ep_comm_s = x.at("expert_parallel").get<std::vector<double>>();
  r.busiest_link = link_from(j.at("busiest_link"));
  for (const json& l : j.at("top_links")) r.top_links.push_back(link_from(l));
  r.num_gpus = j.at("num_gpus");
  const auto& sy = j.at("symmetry");
  r.simulated_gpus = sy.at("simulated_gpus");
  r.dp_simulated = sy.at("dp_simulated");
  r.dp_copies = sy.at("dp_copies");
  r.dp_replicas = sy.at("dp_replicas");
  r.iteration_times_s = j.at("iteration_times_s").get<std::vector<double>>();
  r.symmetry_off_because = sy.at("full_because");
  r.activities = j.at("activities");
  r.sim_wall_s = j.at("sim_wall_s");
  r.events_per_s = j.at("events_per_s");
  const auto& w = j.at("wall_s");
  r.setup_s = w.at("setup");
  r.graph_s = w.at("graph");
  r.engine_s = w.at("engine");
  r.metrics_s = w.at("metrics");
  r.peak_rss_bytes = j.at("peak_rss_bytes");
  for (const json& s : j.at("spans"))
    e.spans.push_back({s[0].get<int>(), static_cast<costmodel::Stream>(s[1].get<int>()), s[2].get<int>(), s[3].get<int>(),
                       s[4].get<double>(), s[5].get<double>()});
  for (const json& n : j.at("net_spans"))
    r.net_spans.push_back({n[0].get<int>(), n[1].get<int>(), static_cast<CommKind>(n[2].get<int>()), n[3].get<int>(),
                           n[4].get<double>(), n[5].get<double>(), n[6].get<double>()});
  return r;
}

TpComm parse_tp_comm(const std::string& s) {
  if (s == "folded") return TpComm::Folded;
  if (s == "explicit") return TpComm::Explicit;
  throw InputError("--tp-comm = '" + s + "' is unknown (allowed: folded, explicit)");
}

std::string_view tp_comm_name(TpComm t) { return t == TpComm::Folded ? "folded" : "explicit"; }

}  // namespace stagecraft::sim
