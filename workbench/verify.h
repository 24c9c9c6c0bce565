// A search's top plans checked on the SimGrid simulator (sim/): each plan's iteration time there
// beside the evaluator's (plan --verify sim), and the plans ranked again under a what-if (plan
// --whatif FILE; sim/whatif_rank.h). In a build without the simulator (STAGECRAFT_BUILD_SIM off)
// the functions that need it throw InputError saying so.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "planner/search.h"
#include "workbench/request.h"

namespace stagecraft::workbench {

// True when this build has the simulator.
bool have_simulator();

// Each of r.best as `estimate` prices it (planner::estimate_candidate), in r.best's order: what
// the simulator runs.
std::vector<costmodel::Estimate> candidate_estimates(const costmodel::ModelSpec& m, const planner::SearchResult& r);
// Each of r.best's iteration time on the simulator (contention, the collectives as flows), in
// r.best's order.
std::vector<double> simulated_times(const costmodel::ModelSpec& m, const planner::SearchResult& r);
// simulated_times when the request asks (--verify sim), else empty.
std::vector<double> verify_on_sim(const SearchRequest& q, const costmodel::ModelSpec& m, const planner::SearchResult& r);

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

}  // namespace stagecraft::workbench
