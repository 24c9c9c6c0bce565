#include "cli/plan_whatif.h"

#include <iostream>

#include "cli/common.h"
#include "schedules/error.h"
#include "schedules/json_read.h"
#ifdef STAGECRAFT_HAVE_SIM
#include "sim/simulate.h"
#include "sim/whatif_rank.h"
#endif

namespace stagecraft::cli {

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
  std::vector<costmodel::Estimate> plans;
  for (const planner::Candidate& c : r.best) plans.push_back(planner::estimate_candidate(m, r.cluster, c));
  for (const sim::RobustRow& x : sim::rank_under_whatif(plans, w, sim::SimOptions{}))
    out.rows.push_back({x.index, x.applies, x.why, x.nominal_s, x.whatif_s});
#else
  (void)m;
  (void)r;
#endif
}

void print_plan_whatif(const PlanWhatIf& w, const planner::SearchResult& r,
                       const std::function<std::string(const planner::Candidate&)>& label) {
  if (w.file.empty()) return;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    const PlanWhatIfRow& x = w.rows[i];
    const std::string plan = "#" + std::to_string(x.index + 1) + " " + label(r.best[x.index]);
    if (!x.applies) {
      rows.push_back({"-", plan, "-", "-", "-"});
      continue;
    }
    rows.push_back({std::to_string(i + 1), plan, fmt_seconds(x.nominal_s), fmt_seconds(x.whatif_s),
                    "+" + fmt_percent(x.nominal_s > 0 ? x.whatif_s / x.nominal_s - 1 : 0)});
  }
  std::cout << "\n"
            << wrap_text("under the what-if " + w.file + " (simulated; " + (w.jitter ? "p90" : "median") +
                             " of its iterations), the plans above ranked again:",
                         kHelpWidth)
            << "\n";
  std::cout << format_table({"#", "plan (nominal rank)", "simulated", "what-if", "slowdown"}, rows, kHelpWidth, 1);
  if (!w.rows.empty() && w.rows.front().applies)
    std::cout << wrap_text("most robust under it: #" + std::to_string(w.rows.front().index + 1) + " (" +
                               fmt_seconds(w.rows.front().whatif_s) + " per iteration)",
                           kHelpWidth)
              << "\n";
  for (const PlanWhatIfRow& x : w.rows)
    if (!x.applies) std::cout << wrap_text("#" + std::to_string(x.index + 1) + " not ranked: " + x.why, kHelpWidth) << "\n";
}

nlohmann::json plan_whatif_json(const PlanWhatIf& w) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanWhatIfRow& x : w.rows) {
    nlohmann::json j = {{"plan", x.index}, {"applies", x.applies}};
    if (x.applies) j["simulated_s"] = x.nominal_s, j["whatif_s"] = x.whatif_s;
    else j["why"] = x.why;
    rows.push_back(j);
  }
  return {{"file", w.file}, {"spec", w.spec}, {"ranked_by", w.jitter ? "p90" : "median"}, {"ranking", rows}};
}

}  // namespace stagecraft::cli
