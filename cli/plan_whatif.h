// plan --whatif FILE, printed: the top plans of a search ranked by their time under a what-if
// (workbench/verify.h ranks them), beside the nominal ranking.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/search.h"
#include "workbench/verify.h"

namespace stagecraft::cli {

// The ranking as a table of at most 100 columns; `label` names a plan (dp/tp/pp and schedule).
// Nothing without a what-if file.
void print_plan_whatif(const workbench::PlanWhatIf& w, const planner::SearchResult& r,
                       const std::function<std::string(const planner::Candidate&)>& label);
nlohmann::json plan_whatif_json(const workbench::PlanWhatIf& w);

}  // namespace stagecraft::cli
