// The planner: every point of a PlanSpace that the bounds do not prune, evaluated with the
// cost model as `stagecraft estimate` evaluates it (the analytic cost table and the compiled
// evaluator, compiled once per schedule shape and reused across the points that share it),
// and again with balanced stage layers where that moves layers (planner/balance.h), ranked by
// iteration time among the plans that fit in memory.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "planner/space.h"

namespace stagecraft::planner {

struct Candidate {
  costmodel::ParallelPlan plan;
  bool fp8 = false;              // priced with the model's linear products in FP8 (PlanSpace::fp8)
  costmodel::Fp8Recipe fp8_recipe = costmodel::Fp8Recipe::Delayed;  // its recipe, with fp8
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;                // model FLOPs utilisation (costmodel/flops.h)
  double hfu = 0;                // hardware FLOPs utilisation, recomputation counted
  double max_memory_bytes = 0;   // largest per-GPU peak
  double headroom_bytes = 0;     // the cluster's usable memory (memory_margin off) less max_memory_bytes
  double bubble_fraction = 0;    // idle share of the pipeline (EvalResult::bubble_fraction)
  costmodel::Fit fit = costmodel::Fit::Fits;  // fits, or tight (over the usable memory, within the GPU's)
  bool untimed = false;          // over the GPU's memory by its untimed peak (memory_walk.h): not
                                 // evaluated in time, iteration_time_s and the rates unknown (0)
};

// The planner's ranking: a plan that fits in the usable memory before any tight one, then by
// iteration time. Every list of plans the planner returns is in this order.
bool ranks_before(const Candidate& a, const Candidate& b);

// A candidate as `estimate` prices it: the model at the candidate's precision, its plan, on the
// cluster the search ran on (what --verify sim and --whatif take to the simulator).
costmodel::Estimate estimate_candidate(const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c, const Candidate& cand);

struct SearchStats {
  long considered = 0;          // points of the space
  long pruned = 0;              // dropped by the memory bound before any evaluation
  long bounded = 0;             // cut by the time bound (branch and bound): they and their balanced
                                // variants cannot enter the top k nor be a choice's best
  long rejected = 0;            // refused by a plan check or a schedule generator
  long evaluated = 0;           // run through the evaluator (balanced variants included)
  long balanced = 0;            // variants with balanced stage layers (planner/balance.h) evaluated
  long infeasible = 0;          // evaluated, and their peak memory exceeds the GPU's memory
  long untimed = 0;             // of them, known over it from the cost table alone (no timeline needed
                                // where no rank offloads: costmodel::untimed_peak_memory_bytes)
  long tight = 0;               // evaluated, over the usable memory but within the GPU's
  long schedules_compiled = 0;  // evaluators compiled (the rest reused one)
  std::map<std::string, long> rejections;  // the refusals' reasons (first line) and their counts
  double seconds = 0;           // wall time of the search
};

struct SearchOptions {
  int top_k = 10;      // candidates kept, fastest first
  std::function<void(long done, long total)> progress;  // points decided of the space, at the start,
                                                         // as they are decided and at the end, from any
                                                         // of the search's threads one call at a time,
                                                         // done never falling (the caller throttles what
                                                         // it prints: cli/progress.h); empty: not called
  bool prune = true;   // apply the memory bound (off: evaluate every point, for tests)
  bool balance = true; // also evaluate each multi-stage plan with balanced stage layers
  bool bound = true;   // branch and bound: cut the points whose iteration-time lower bound
                       // (planner/bounds.h) exceeds the k-th best plan that fits and the best of
                       // each of their choices (off: evaluate every point, for tests); the plans
                       // kept, their order and the choices' bests are the same either way
  int threads = 0;     // threads the points are priced and evaluated on; 0: every core. The
                       // result does not depend on it (outcomes merged in the space's order)
  const costmodel::Profile* profile = nullptr;  // measured costs (`stagecraft profile`) instead of the
                                                // analytic ones, as `estimate --profile` prices
  // Prices a point instead of the analytic cost table (a model given as a graph: graphs/plan.h).
  // The model's own checks, the memory bound, the automatic schedule parameters and the
  // balanced variants are then the estimator's (skipped here); InputError rejects the point.
  std::function<costmodel::Estimate(const costmodel::ClusterSpec&, const costmodel::ParallelPlan&)> estimate;
};

// One value of a choice the space offers more than one of (its zero stage, shard group, context
// parallelism, precision): what became of its points, and its fastest plan that fits. What
// `plan` reports for the choices the best plan did not make.
struct ChoiceBest {
  std::string choice;             // "zero 3", "shard group 8", "cp 2", "fp8", ...
  long pruned = 0;                // its points dropped by the memory bound
  long bounded = 0;               // its points cut by the time bound (SearchStats::bounded)
  long rejected = 0;              // its points refused by a plan check or a schedule generator
  std::string rejection{};        // the first refusal's reason (first line), empty when none
  long evaluated = 0;             // evaluated (balanced variants included)
  long fitting = 0;               // of them, the plans that fit in the usable memory
  long tight = 0;                 // of them, the tight plans (over the usable memory, within the GPU's)
  std::optional<Candidate> best{};  // its fastest plan that fits; else its fastest tight one; else empty
};

struct SearchResult {
  costmodel::ClusterSpec cluster;   // the cluster the plans run on (PlanSpace::gpus of it)
  std::vector<Candidate> best;      // up to top_k plans, those that fit first, then tight ones (ranks_before)
  std::vector<ChoiceBest> choices;  // per value of each choice with several, in the space's order
  SearchStats stats;
};

// The reason that refused the most points of a search, with its count; empty when none was refused.
std::pair<std::string, long> main_rejection(const SearchStats& s);

SearchResult search(const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c, const PlanSpace& space,
                    const SearchOptions& opt = {});

}  // namespace stagecraft::planner
