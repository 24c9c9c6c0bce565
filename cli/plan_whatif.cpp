#include "cli/plan_whatif.h"

#include <iostream>

#include "cli/common.h"

namespace stagecraft::cli {

void print_plan_whatif(const workbench::PlanWhatIf& w, const planner::SearchResult& r,
                       const std::function<std::string(const planner::Candidate&)>& label) {
  if (w.file.empty()) return;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < w.rows.size(); ++i) {
    const workbench::PlanWhatIfRow& x = w.rows[i];
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
  for (const workbench::PlanWhatIfRow& x : w.rows)
    if (!x.applies) std::cout << wrap_text("#" + std::to_string(x.index + 1) + " not ranked: " + x.why, kHelpWidth) << "\n";
}

nlohmann::json plan_whatif_json(const workbench::PlanWhatIf& w) {
  nlohmann::json rows = nlohmann::json::array();
  for (const workbench::PlanWhatIfRow& x : w.rows) {
    nlohmann::json j = {{"plan", x.index}, {"applies", x.applies}};
    if (x.applies) j["simulated_s"] = x.nominal_s, j["whatif_s"] = x.whatif_s;
    else j["why"] = x.why;
    rows.push_back(j);
  }
  return {{"file", w.file}, {"spec", w.spec}, {"ranked_by", w.jitter ? "p90" : "median"}, {"ranking", rows}};
}

}  // namespace stagecraft::cli
