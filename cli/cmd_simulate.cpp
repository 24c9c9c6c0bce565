// `stagecraft simulate`: one configuration on the SimGrid simulator (docs/sim.md), with the
// same model/cluster/plan flags as estimate, plus the platform and tensor-parallel options.
#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "costmodel/estimate.h"
#include "runtime/support/rules.h"
#include "schedules/error.h"
#include "sim/simulate.h"
#include "sim/trace.h"
#include "sim/whatif.h"
#include "workbench/simulate.h"

namespace stagecraft::cli {
namespace {

struct SimulateOpts {
  workbench::SimulateRequest sim;  // the configuration, the simulator's options and the what-ifs
  bool json = false;               // one JSON object instead of the tables
  std::string trace;               // a Chrome trace of the simulation goes here (empty: none)
};

// The what-if's figures beside the nominal ones.
void print_whatif(const sim::WhatIf& w, const sim::WhatIfResult& r) {
  const bool jit = w.jitter.dist != sim::JitterDist::None;
  auto vs = [&](double x) {
    return fmt_seconds(x) + (r.nominal_s > 0 ? " (" + fmt_num(100 * (x / r.nominal_s - 1), 2) + "% vs nominal)" : "");
  };
  std::vector<std::vector<std::string>> rows = {
      {"nominal iteration time", fmt_seconds(r.nominal_s)},
      {"first iteration (from 0)", fmt_seconds(r.first_iteration_s)},
      {"iterations summarised", std::to_string(r.iteration_s.size()) + " (after the first)"},
      {"median (p50)", vs(r.p50_s)},
      {"p90", vs(r.p90_s)},
      {"p99", vs(r.p99_s)},
      {"mean / min / max", fmt_seconds(r.mean_s) + " / " + fmt_seconds(r.min_s) + " / " + fmt_seconds(r.max_s)},
      {"replicas simulated", std::to_string(r.dp_simulated) + " of " + std::to_string(r.dp_replicas)},
  };
  if (jit) rows.push_back({"jitter", sim::jitter_dist_name(w.jitter.dist) + ", cv " + fmt_num(w.jitter.cv, 4) + ", seed " +
                                         std::to_string(w.jitter.seed)});
  std::cout << "\n" << format_table({"what-if", "value"}, rows, kHelpWidth, 1);
}

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// `refusal`: why `train` would not run the plan (runtime::runtime_refusal), empty when it would.
void print_simulation(const costmodel::Estimate& ev, const costmodel::Estimate& e, const sim::SimResult& r,
                      const sim::SimOptions& so, const std::string& refusal) {
  const auto& p = e.plan;
  const std::string which =
      r.dp_simulated < r.dp_replicas
          ? std::to_string(r.simulated_gpus) + " simulated: " + std::to_string(r.dp_simulated) + " of " +
                std::to_string(r.dp_replicas) + " data-parallel replicas" + (p.cp > 1 ? " (dp x cp)" : "") +
                (r.dp_copies > 1 ? " by symmetry" : ", the differing blocks and one for the rest")
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
  if (!o.sim.platform.empty()) check_input_file("--platform", o.sim.platform);
  workbench::SimulateRequest q = o.sim;
  q.record = !o.trace.empty();
  const workbench::Simulation s = workbench::simulate(q, print_warning);
  const costmodel::Estimate& e = s.simulated;
  if (!o.trace.empty()) {
    drawing::TraceOptions to;
    to.title = e.model.name + " on " + e.cluster.name + ", " + e.schedule.name + " (simulated)";
    write_file_atomic(o.trace, sim::sim_trace(e.schedule, s.result, to).dump() + "\n");
  }
  if (o.json) {
    nlohmann::json j = costmodel::to_json(e);
    nlohmann::json r = sim::to_json(s.result);
    r.erase("spans");
    r.erase("net_spans");
    j["engine"] = "sim";
    j["tp_comm"] = std::string(sim::tp_comm_name(s.options.tp_comm));
    j["evaluator_iteration_time_s"] = s.evaluated.eval.iteration_time_s;
    j["simulation"] = r;
    if (!s.whatif.empty()) j["whatif"] = {{"spec", sim::to_json(s.whatif)}, {"result", sim::to_json(s.whatif_result)}};
    std::cout << j.dump(2) << "\n";
  } else {
    print_simulation(s.evaluated, e, s.result, s.options, s.in.graph ? "" : runtime::runtime_refusal(e.model, e.plan, e.schedule));
    if (!s.whatif.empty()) print_whatif(s.whatif, s.whatif_result);
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOpts>();
  CLI::App* c = app.add_subcommand("simulate", "simulate one configuration on a SimGrid platform (network contention, traces)");
  add_plan_flags(c, o->sim.plan, true);
  c->add_option("--platform", o->sim.platform,
                "SimGrid XML platform; GPU hosts carry the property stagecraft_gpu=\"<rank>\" (default: built from --cluster)");
  c->add_option("--tp-comm", o->sim.tp_comm, "tensor-parallel all-reduces: explicit (default: ring all-reduces over the tp group, sharing links) or folded (in compute, as the evaluator)");
  c->add_option("--iterations", o->sim.iterations,
                 "iterations simulated; the last one is reported (default 3). With a what-if: the iterations summarised, "
                 "after one warm-up (default 1, or 20 with --jitter)");
  c->add_flag("--no-symmetry", o->sim.no_symmetry,
              "simulate every data-parallel replica (default: one block of replicas stands for all where the placement repeats; docs/sim.md)");
  c->add_flag("--json", o->json, "print one JSON object instead of the tables");
  c->add_option("--trace", o->trace, "write a Chrome trace (evaluator layout plus network flows) to this file");
  c->add_option("--whatif", o->sim.whatif, "what-if JSON file: slow GPUs, degraded NICs, late ranks, jitter (docs/whatif.md)");
  c->add_option("--slow-rank", o->sim.slow_rank, "RANK:FACTOR: that GPU computes at FACTOR of its rate, (0, 1] (repeatable)");
  c->add_option("--slow-node", o->sim.slow_node, "NODE:FACTOR: every GPU of that node computes at FACTOR of its rate (repeatable)");
  c->add_option("--slow-fraction", o->sim.slow_fraction,
                "FRACTION:FACTOR: that share of the GPUs, picked by --seed, computes at FACTOR of its rate");
  c->add_option("--degraded-nic", o->sim.degraded_nic,
                "NODE:FACTOR or NODE:NIC:FACTOR: that node's NICs (or one) at FACTOR of their bandwidth, [0, 1]; 0 = "
                "failed, its traffic moved to the node's next NIC (repeatable)");
  c->add_option("--late-rank", o->sim.late_rank, "RANK:SECONDS: that GPU starts its first action SECONDS late (repeatable)");
  c->add_option("--jitter", o->sim.jitter,
                "DIST:CV: every compute action's duration times a draw of mean 1 (normal or lognormal, coefficient of "
                "variation CV in [0, 1]); prints p50, p90, p99 over --iterations");
  c->add_option("--seed", o->sim.seed, "seed of --slow-fraction's choice and --jitter's draws (default 1)");
  c->callback([o, c] {
    o->sim.iterations_given = c->count("--iterations") > 0;
    run_simulate(*o);
  });
}

}  // namespace stagecraft::cli
