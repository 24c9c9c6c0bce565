// plan --whatif FILE: the top plans of a search simulated with and without a what-if
// (sim/whatif_rank.h) and ranked by their time under it, beside the nominal ranking.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/search.h"

namespace stagecraft::cli {

struct PlanWhatIfRow {
  size_t index = 0;       // the plan's position in the search's list (0: its best)
  bool applies = true;    // false: the what-if names a rank, node or NIC this plan does not have
  std::string why;        // why not, when it does not apply
  double nominal_s = 0;   // simulated without the what-if
  double whatif_s = 0;    // under it (p90 with jitter, else the median)
};

struct PlanWhatIf {
  std::string file;                 // the what-if file (empty: none asked for)
  nlohmann::json spec;              // the what-if as read (sim::to_json)
  bool jitter = false;              // ranked by p90 (jitter) rather than the median
  std::vector<PlanWhatIfRow> rows;  // ranked under the what-if
};

// Reads and checks `file` (docs/whatif.md; InputError naming the field), before any search; an
// empty file gives an empty what-if. InputError where the build has no simulator.
PlanWhatIf load_plan_whatif(const std::string& file);
// The what-if against the GPUs the search plans on (every plan of a search takes `gpus` GPUs of
// cluster `c`), by sim::resolve's rules: a rank, node or NIC they do not have, or a NIC what-if
// on plans inside one node, is refused before the search (InputError naming the file's field),
// not left to mark every plan "not ranked". Nothing without a file.
void check_plan_whatif(const PlanWhatIf& w, const costmodel::ClusterSpec& c, int gpus);
// Fills w.rows: r.best ranked under the what-if (nothing without a file).
void rank_plan_whatif(PlanWhatIf& w, const costmodel::ModelSpec& m, const planner::SearchResult& r);
// The ranking as a table of at most 100 columns; `label` names a plan (dp/tp/pp and schedule).
void print_plan_whatif(const PlanWhatIf& w, const planner::SearchResult& r,
                       const std::function<std::string(const planner::Candidate&)>& label);
nlohmann::json plan_whatif_json(const PlanWhatIf& w);

}  // namespace stagecraft::cli
