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
#include "schedules/json_read.h"
#include "sim/simulate.h"
#include "sim/trace.h"
#include "sim/whatif.h"

namespace stagecraft::cli {
namespace {

struct SimulateOpts {
  PlanFlags plan;
  std::string platform;         // SimGrid XML platform file; empty = built from the cluster
  std::string tp_comm = "explicit";
  int iterations = 3;
  bool iterations_given = false;  // --iterations on the command line (a what-if reads it as its samples)
  bool no_symmetry = false;     // simulate every data-parallel replica (sim/symmetry.h)
  bool json = false;
  std::string trace;
  // what-ifs (docs/whatif.md)
  std::string whatif;                    // JSON what-if file
  std::vector<std::string> slow_rank;    // RANK:FACTOR
  std::vector<std::string> slow_node;    // NODE:FACTOR
  std::string slow_fraction;             // FRACTION:FACTOR
  std::vector<std::string> degraded_nic; // NODE:FACTOR or NODE:NIC:FACTOR
  std::vector<std::string> late_rank;    // RANK:SECONDS
  std::string jitter;                    // DIST:CV
  std::uint64_t seed = 1;                // --slow-fraction's choice and --jitter's draws
};

// "A:B[:C]" split at ':' into numbers; `shape` and `allowed` name the form in errors.
std::vector<double> fields(const std::string& flag, const std::string& v, size_t lo, size_t hi, const std::string& shape) {
  std::vector<double> out;
  std::stringstream in(v);
  for (std::string part; std::getline(in, part, ':');) {
    try {
      size_t used = 0;
      out.push_back(std::stod(part, &used));
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      throw InputError(flag + " " + v + ": '" + part + "' is not a number (allowed: " + shape + ")");
    }
  }
  if (out.size() < lo || out.size() > hi)
    throw InputError(flag + " " + v + ": " + std::to_string(out.size()) + " field(s) (allowed: " + shape + ")");
  return out;
}

int whole(const std::string& flag, const std::string& v, double x) {
  if (x < 0 || x != static_cast<double>(static_cast<long long>(x)) || x > 1e9)
    throw InputError(flag + " " + v + ": " + std::to_string(x) + " is not a rank, node or NIC (allowed: an integer >= 0)");
  return static_cast<int>(x);
}

// The what-if of the file and the flags together (the flags' entries after the file's).
sim::WhatIf whatif_of(const SimulateOpts& o) {
  sim::WhatIf w;
  if (!o.whatif.empty()) w = sim::whatif_from_json(schedules::read_json_file(o.whatif, "--whatif"), "--whatif " + o.whatif);
  for (const auto& v : o.slow_rank) {
    const auto f = fields("--slow-rank", v, 2, 2, "RANK:FACTOR, FACTOR in (0, 1]");
    w.slow.push_back({"rank", whole("--slow-rank", v, f[0]), 0, 1, f[1], "--slow-rank " + v});
  }
  for (const auto& v : o.slow_node) {
    const auto f = fields("--slow-node", v, 2, 2, "NODE:FACTOR, FACTOR in (0, 1]");
    w.slow.push_back({"node", whole("--slow-node", v, f[0]), 0, 1, f[1], "--slow-node " + v});
  }
  if (!o.slow_fraction.empty()) {
    const auto f = fields("--slow-fraction", o.slow_fraction, 2, 2, "FRACTION:FACTOR, both in (0, 1]");
    w.slow.push_back({"fraction", 0, f[0], o.seed, f[1], "--slow-fraction " + o.slow_fraction});
  }
  for (const auto& v : o.degraded_nic) {
    const auto f = fields("--degraded-nic", v, 2, 3, "NODE:FACTOR or NODE:NIC:FACTOR, FACTOR in [0, 1], 0 = failed");
    w.nics.push_back({whole("--degraded-nic", v, f[0]), f.size() == 3 ? whole("--degraded-nic", v, f[1]) : -1, f.back(),
                      "--degraded-nic " + v});
  }
  for (const auto& v : o.late_rank) {
    const auto f = fields("--late-rank", v, 2, 2, "RANK:SECONDS, SECONDS >= 0");
    w.late.push_back({whole("--late-rank", v, f[0]), f[1], "--late-rank " + v});
  }
  if (!o.jitter.empty()) {
    const size_t at = o.jitter.find(':');
    try {
      w.jitter.dist = sim::parse_jitter_dist(o.jitter.substr(0, at));
    } catch (const InputError&) {
      throw InputError("--jitter " + o.jitter + ": unknown distribution (allowed: normal:CV or lognormal:CV, CV in [0, 1])");
    }
    const auto f = fields("--jitter", at == std::string::npos ? "" : o.jitter.substr(at + 1), 1, 1,
                          "normal:CV or lognormal:CV, CV in [0, 1]");
    if (!(f[0] >= 0 && f[0] <= 1)) throw InputError("--jitter " + o.jitter + ": CV = " + fmt_num(f[0], 3) + " (allowed: [0, 1])");
    w.jitter.cv = f[0];
    w.jitter.seed = o.seed;
  }
  return w;
}

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
  sim::WhatIf w = whatif_of(o);
  if (o.iterations_given) w.iterations = o.iterations;
  sim::SimResult r;
  sim::WhatIfResult wr;
  costmodel::Estimate e;
  if (w.empty()) {
    e = sim::simulated_estimate(ev, so, &r);
  } else {
    wr = sim::simulate_whatif(ev, w, so, true, &r);
    e = sim::with_simulation(ev, r);
  }
  if (!o.trace.empty()) {
    drawing::TraceOptions to;
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
    if (!w.empty()) j["whatif"] = {{"spec", sim::to_json(w)}, {"result", sim::to_json(wr)}};
    std::cout << j.dump(2) << "\n";
  } else {
    print_simulation(ev, e, r, so, in.graph ? "" : runtime::runtime_refusal(e.model, e.plan, e.schedule));
    if (!w.empty()) print_whatif(w, wr);
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
  c->add_option("--iterations", o->iterations,
                 "iterations simulated; the last one is reported (default 3). With a what-if: the iterations summarised, "
                 "after one warm-up (default 1, or 20 with --jitter)");
  c->add_flag("--no-symmetry", o->no_symmetry,
              "simulate every data-parallel replica (default: one block of replicas stands for all where the placement repeats; docs/sim.md)");
  c->add_flag("--json", o->json, "print one JSON object instead of the tables");
  c->add_option("--trace", o->trace, "write a Chrome trace (evaluator layout plus network flows) to this file");
  c->add_option("--whatif", o->whatif, "what-if JSON file: slow GPUs, degraded NICs, late ranks, jitter (docs/whatif.md)");
  c->add_option("--slow-rank", o->slow_rank, "RANK:FACTOR: that GPU computes at FACTOR of its rate, (0, 1] (repeatable)");
  c->add_option("--slow-node", o->slow_node, "NODE:FACTOR: every GPU of that node computes at FACTOR of its rate (repeatable)");
  c->add_option("--slow-fraction", o->slow_fraction,
                "FRACTION:FACTOR: that share of the GPUs, picked by --seed, computes at FACTOR of its rate");
  c->add_option("--degraded-nic", o->degraded_nic,
                "NODE:FACTOR or NODE:NIC:FACTOR: that node's NICs (or one) at FACTOR of their bandwidth, [0, 1]; 0 = "
                "failed, its traffic moved to the node's next NIC (repeatable)");
  c->add_option("--late-rank", o->late_rank, "RANK:SECONDS: that GPU starts its first action SECONDS late (repeatable)");
  c->add_option("--jitter", o->jitter,
                "DIST:CV: every compute action's duration times a draw of mean 1 (normal or lognormal, coefficient of "
                "variation CV in [0, 1]); prints p50, p90, p99 over --iterations");
  c->add_option("--seed", o->seed, "seed of --slow-fraction's choice and --jitter's draws (default 1)");
  c->callback([o, c] {
    o->iterations_given = c->count("--iterations") > 0;
    run_simulate(*o);
  });
}

}  // namespace stagecraft::cli
