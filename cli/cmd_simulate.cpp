// `stagecraft simulate`: one configuration on the SimGrid simulator (docs/sim.md), with the
// same model/cluster/plan flags as estimate, plus the platform and tensor-parallel options.
#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "costmodel/estimate.h"
#include "costmodel/runtime_support.h"
#include "sim/simulate.h"
#include "sim/trace.h"

namespace stagecraft::cli {
namespace {

struct SimulateOpts {
  PlanFlags plan;
  std::string platform;         // SimGrid XML platform file; empty = built from the cluster
  std::string tp_comm = "explicit";
  int iterations = 3;
  bool no_symmetry = false;     // simulate every data-parallel replica (sim/symmetry.h)
  bool json = false;
  std::string trace;
};

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// `refusal`: why `train` would not run the plan (costmodel::runtime_refusal), empty when it would.
void print_simulation(const costmodel::Estimate& ev, const costmodel::Estimate& e, const sim::SimResult& r,
                      const sim::SimOptions& so, const std::string& refusal) {
  const auto& p = e.plan;
  const std::string which = r.dp_copies > 1 ? std::to_string(r.simulated_gpus) + " simulated: " + std::to_string(r.dp_simulated) + " of " +
                                                  std::to_string(r.dp_simulated * r.dp_copies) + " data-parallel replicas" +
                                                  (p.cp > 1 ? " (dp x cp)" : "") + " by symmetry"
                            : r.symmetry_off_because.empty() ? "all simulated"
                                                             : "all simulated: " + r.symmetry_off_because;
  std::ostringstream head;
  head << "model " << e.model.name << " on cluster " << e.cluster.name << " (" << p.num_gpus() << " GPUs, " << which
            << (so.platform_file.empty() ? "" : ", platform " + so.platform_file) << ")";
  std::cout << wrap_text(head.str(), kHelpWidth) << "\n";
  head.str("");
  head << "plan: dp " << p.dp << ", tp " << p.tp << ", pp " << p.pp << ", microbatch size " << p.microbatch_size
            << ", " << p.num_microbatches << " microbatches, schedule " << e.schedule.name << ", tp comm "
            << sim::tp_comm_name(so.tp_comm) << (p.zero ? ", zero " + zero_label(p) : "");
  std::cout << wrap_text(head.str(), kHelpWidth) << "\n";
  if (!refusal.empty()) std::cout << note_line("`train` does not run this plan: " + refusal) << "\n";
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"iteration time", fmt_seconds(e.eval.iteration_time_s) + " (evaluator " + fmt_seconds(ev.eval.iteration_time_s) + ")"},
      {"throughput", fmt_num(e.tokens_per_s, 0) + " tokens/s"},
      {"model TFLOP/s per GPU", utilization_cell(e)},
      {"bubble / compute", fmt_num(e.eval.bubble_over_compute, 4)},
      {"bubble fraction", fmt_num(e.eval.bubble_fraction, 4)},
      {"exposed pipeline comm (worst rank)", fmt_seconds(max_of(r.exposed_pp_comm_s))},
      {"exposed data-parallel comm (worst rank)", fmt_seconds(max_of(r.eval.exposed_dp_comm_s))},
      {"exposed tensor-parallel comm (worst rank)", fmt_seconds(max_of(r.exposed_tp_comm_s))},
      {"exposed expert-parallel comm (worst rank)", fmt_seconds(max_of(r.exposed_ep_comm_s))},
      {"busiest link", r.busiest_link.name + " " + fmt_num(100 * r.busiest_link.utilisation, 1) + "%"},
      {"peak memory (largest rank)", fmt_bytes(e.max_memory_bytes)},
      {"headroom (fullest rank)", fmt_signed_bytes(e.usable_memory_bytes - e.max_memory_bytes) + " of " +
                                      fmt_bytes(e.usable_memory_bytes) + " usable" + (e.fits ? " (fits)" : " (DOES NOT FIT)")},
      {"simulated events", std::to_string(r.activities) + " in " + fmt_seconds(r.sim_wall_s) + " (" +
                               fmt_num(r.events_per_s, 0) + "/s)"},
  };
  std::cout << format_table({"metric", "value"}, rows, kHelpWidth, 1) << "\n";
  std::vector<std::vector<std::string>> ranks;
  for (int i = 0; i < e.schedule.num_ranks; ++i) {
    size_t k = static_cast<size_t>(i);
    ranks.push_back({std::to_string(i), fmt_seconds(r.eval.compute_s[k]), fmt_seconds(r.eval.idle_s[k]),
                     fmt_seconds(r.exposed_pp_comm_s[k]), fmt_seconds(r.eval.exposed_dp_comm_s[k]),
                     fmt_seconds(r.exposed_tp_comm_s[k]), fmt_bytes(r.eval.peak_memory_bytes[k])});
  }
  std::cout << format_table({"pipeline rank", "compute", "idle", "exposed pp", "exposed dp", "exposed tp", "peak memory"}, ranks)
            << "\n";
  std::vector<std::vector<std::string>> links;
  for (const auto& l : r.top_links)
    links.push_back({l.name, fmt_num(l.bandwidth_Bps / 1e9, 1) + " GB/s", fmt_bytes(l.bytes), fmt_num(100 * l.utilisation, 1) + "%"});
  std::cout << format_table({"busiest links", "bandwidth", "bytes / iteration", "utilisation"}, links, kHelpWidth, 0);
}

void run_simulate(const SimulateOpts& o) {
  if (!o.trace.empty()) check_output_file("--trace", o.trace);
  if (!o.platform.empty()) check_input_file("--platform", o.platform);
  Inputs in = resolve(o.plan);
  sim::SimOptions so;
  so.platform_file = o.platform;
  so.tp_comm = sim::parse_tp_comm(o.tp_comm);
  so.iterations = o.iterations;
  so.record = !o.trace.empty();
  so.symmetry = !o.no_symmetry;
  costmodel::EstimateOptions eo;
  eo.profile = in.profile_ptr();
  costmodel::Estimate ev = estimate_inputs(in, in.plan, eo);
  sim::SimResult r;
  costmodel::Estimate e = sim::simulated_estimate(ev, so, &r);
  if (!o.trace.empty()) {
    costmodel::TraceOptions to;
    to.title = e.model.name + " on " + e.cluster.name + ", " + e.schedule.name + " (simulated)";
    write_file_atomic(o.trace, sim::sim_trace(e.schedule, r, to).dump() + "\n");
  }
  if (o.json) {
    nlohmann::json j = costmodel::to_json(e);
    nlohmann::json s = sim::to_json(r);
    s.erase("spans");
    s.erase("net_spans");
    j["engine"] = "sim";
    j["tp_comm"] = std::string(sim::tp_comm_name(so.tp_comm));
    j["evaluator_iteration_time_s"] = ev.eval.iteration_time_s;
    j["simulation"] = s;
    std::cout << j.dump(2) << "\n";
  } else {
    print_simulation(ev, e, r, so, in.graph ? "" : costmodel::runtime_refusal(e.model, e.plan, e.schedule));
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOpts>();
  CLI::App* c = app.add_subcommand("simulate", "simulate one configuration on a SimGrid platform (network contention, traces)");
  add_plan_flags(c, o->plan, true);
  c->add_option("--platform", o->platform,
                "SimGrid XML platform; GPU hosts carry the property stagecraft_gpu=\"<rank>\" (default: built from --cluster)");
  c->add_option("--tp-comm", o->tp_comm, "tensor-parallel all-reduces: explicit (default: ring all-reduces over the tp group, sharing links) or folded (in compute, as the evaluator)");
  c->add_option("--iterations", o->iterations, "iterations simulated; the last one is reported (default 3)");
  c->add_flag("--no-symmetry", o->no_symmetry,
              "simulate every data-parallel replica (default: one block of replicas stands for all where the placement repeats; docs/sim.md)");
  c->add_flag("--json", o->json, "print one JSON object instead of the tables");
  c->add_option("--trace", o->trace, "write a Chrome trace (evaluator layout plus network flows) to this file");
  c->callback([o] { run_simulate(*o); });
}

}  // namespace stagecraft::cli
