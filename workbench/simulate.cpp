#include "workbench/simulate.h"

#include <sstream>

#include "schedules/error.h"
#include "schedules/json_read.h"
#include "workbench/route.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

namespace {

// "A:B[:C]" split at ':' into numbers, lo to hi of them; `shape` names the form in errors.
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

}  // namespace

sim::WhatIf whatif_of(const SimulateRequest& o) {
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

Simulation simulate(const SimulateRequest& q, const WarnFn& warn) {
  Simulation s;
  s.in = resolve(q.plan, warn);
  s.options.platform_file = q.platform;
  s.options.tp_comm = sim::parse_tp_comm(q.tp_comm);
  s.options.iterations = q.iterations;
  s.options.record = q.record;
  s.options.symmetry = !q.no_symmetry;
  costmodel::EstimateOptions eo;
  eo.profile = s.in.profile_ptr();
  s.evaluated = estimate_inputs(s.in, s.in.plan, eo);
  s.whatif = whatif_of(q);
  if (q.iterations_given) s.whatif.iterations = q.iterations;
  if (s.whatif.empty()) {
    s.simulated = sim::simulated_estimate(s.evaluated, s.options, &s.result);
  } else {
    s.whatif_result = sim::simulate_whatif(s.evaluated, s.whatif, s.options, true, &s.result);
    s.simulated = sim::with_simulation(s.evaluated, s.result);
  }
  return s;
}

}  // namespace stagecraft::workbench
