#include "workbench/verify.h"

#include "schedules/error.h"
#include "schedules/json_read.h"
#ifdef STAGECRAFT_HAVE_SIM
#include "sim/simulate.h"
#include "sim/whatif_rank.h"
#endif

namespace stagecraft::workbench {

bool have_simulator() {
#ifdef STAGECRAFT_HAVE_SIM
  return true;
#else
  return false;
#endif
}

std::vector<costmodel::Estimate> candidate_estimates(const costmodel::ModelSpec& m, const planner::SearchResult& r) {
  std::vector<costmodel::Estimate> out;
  for (const planner::Candidate& c : r.best) out.push_back(planner::estimate_candidate(m, r.cluster, c));
  return out;
}

std::vector<double> simulated_times(const costmodel::ModelSpec& m, const planner::SearchResult& r) {
#ifdef STAGECRAFT_HAVE_SIM
  std::vector<double> out;
  for (const costmodel::Estimate& e : candidate_estimates(m, r)) out.push_back(sim::simulated_estimate(e).eval.iteration_time_s);
  return out;
#else
  (void)m;
  (void)r;
  throw InputError("--verify sim needs a build with the simulator (STAGECRAFT_BUILD_SIM)");
#endif
}

std::vector<double> verify_on_sim(const SearchRequest& q, const costmodel::ModelSpec& m, const planner::SearchResult& r) {
  if (q.verify.empty()) return {};
  if (q.verify != "sim") throw InputError("--verify = '" + q.verify + "' is invalid (allowed: sim)");
  return simulated_times(m, r);
}

PlanWhatIf load_plan_whatif(const std::string& file) {
  PlanWhatIf out;
  if (file.empty()) return out;
#ifdef STAGECRAFT_HAVE_SIM
  const sim::WhatIf w = sim::whatif_from_json(schedules::read_json_file(file, "--whatif"), "--whatif " + file);
  out.file = file;
  out.spec = sim::to_json(w);
  out.jitter = w.jitter.dist != sim::JitterDist::None;
  return out;
#else
  throw InputError("--whatif needs a build with the simulator (STAGECRAFT_BUILD_SIM)");
#endif
}

void check_plan_whatif(const PlanWhatIf& w, const costmodel::ClusterSpec& c, int gpus) {
  if (w.file.empty()) return;
#ifdef STAGECRAFT_HAVE_SIM
  sim::resolve(sim::whatif_from_json(w.spec, "--whatif " + w.file), c, gpus);
#else
  (void)c;
  (void)gpus;
#endif
}

void rank_plan_whatif(PlanWhatIf& out, const costmodel::ModelSpec& m, const planner::SearchResult& r) {
  if (out.file.empty()) return;
#ifdef STAGECRAFT_HAVE_SIM
  const sim::WhatIf w = sim::whatif_from_json(out.spec, "--whatif " + out.file);
  for (const sim::RobustRow& x : sim::rank_under_whatif(candidate_estimates(m, r), w, sim::SimOptions{}))
    out.rows.push_back({x.index, x.applies, x.why, x.nominal_s, x.whatif_s});
#else
  (void)m;
  (void)r;
#endif
}

}  // namespace stagecraft::workbench
