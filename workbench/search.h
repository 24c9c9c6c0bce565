// A plan search as a library (`stagecraft plan`, docs/planner.md): a SearchRequest resolved into
// the model, cluster and what-if it names, the planner's space for a number of GPUs, the search
// (workbench/space.h) itself with its refusals, and the plan file of its best plan. GPU-count sweeps:
// workbench/sweep.h; the simulator's check of the top plans: workbench/verify.h.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/profile.h"
#include "costmodel/specs.h"
#include "graphs/graph.h"
#include "planner/search.h"
#include "workbench/from.h"
#include "workbench/request.h"
#include "workbench/verify.h"

namespace stagecraft::workbench {

struct SearchInputs {
  costmodel::ModelSpec model;          // as the planner enumerates it (a graph's: graphs::plan_model_of)
  std::optional<graphs::Graph> graph;  // --model FILE.json with "format": "stagecraft-graph"
  costmodel::ClusterSpec cluster;      // with --memory-margin, --nodes and --gpus-used-per-node applied
  std::optional<costmodel::Profile> profile;  // from --profile
  long global_batch = 0;               // --global-batch, else the --from file's
  std::vector<int> counts;             // --gpus as counts, in order (empty: the whole cluster, one search)
  PlanWhatIf whatif;                   // --whatif read and checked (file empty: none)
};

// Loads what the request names and refuses what cannot be searched, in the order `plan` always
// has (InputError naming the flag): the cluster, --from, the graph's refusals, the what-if file,
// the model and its flags, the cluster's overrides, the profile, --tokens, --verify, --gpus (and
// what several counts cannot do: --out, --layer-tp, --whatif).
SearchInputs resolve_search(const SearchRequest& q, const WarnFn& warn = {});

// Points decided of the space, as planner::SearchOptions::progress reports them.
using ProgressFn = std::function<void(long done, long total)>;

// The planner on the inputs: the analytic cost table, or a graph's (graphs/plan.h); with a
// profile each point priced as `estimate --profile` prices it.
planner::SearchResult search_route(const SearchInputs& in, const planner::PlanSpace& space, const planner::SearchOptions& o);

// The one search of a request on in.counts' first count (or the whole cluster): the what-if
// checked against those GPUs first, the top --top plans kept. A space the flags leave empty,
// or that no plan passes, is an InputError naming what removed the points; one whose plans are
// all too large for the GPU's memory an Error (a run-time finding).
planner::SearchResult search_plans(const SearchInputs& in, const SearchRequest& q, const ProgressFn& progress = {});

// The fastest plan that fits in the usable memory among the ranked plans; null when none does.
const planner::Candidate* fastest_fitting(const std::vector<planner::Candidate>& best);

// A plan file that carries its inputs (issue 52): the plan's fields, the model (as priced: FP8
// when the plan was priced in FP8; a graph model by its file, `graph_file`) and the cluster (as
// searched), so that `estimate --plan` and `train --plan` need no --model or --cluster.
nlohmann::json plan_file_json(const planner::Candidate& best, const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
                              const std::string& graph_file);

}  // namespace stagecraft::workbench
