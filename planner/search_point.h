// One point of the planner's search (planner/search.h), priced and evaluated on one thread:
// what search() does for each point, with the caches of one unit of work (compiled evaluators
// and lowered schedules, by schedule shape), so that units run side by side share nothing.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <string>

#include "planner/search.h"

namespace stagecraft::planner {

// One precision searched: 16 bits, or FP8 with a recipe.
struct Precision {
  bool fp8 = false;
  costmodel::Fp8Recipe recipe = costmodel::Fp8Recipe::Delayed;
};

// What every point of one search shares, read-only while threads run.
struct SearchContext {
  const costmodel::ModelSpec* base = nullptr;  // the model as given (its layers, for balancing)
  costmodel::ClusterSpec cluster;              // the cluster the plans run on (plan_cluster)
  const PlanSpace* space = nullptr;            // the space searched
  const SearchOptions* opt = nullptr;          // the search's options
  bool custom = false;                         // points priced by opt->estimate
};

// One plan tried: the point itself or its variant with balanced stage layers.
struct Trial {
  bool rejected = false;  // refused by a plan check or a schedule generator
  std::string why;        // the refusal's first line, when rejected
  Candidate cand;         // its summary, when not rejected
  bool fits = false;      // within the GPU's memory (tight included)
};

// What became of one point; search() merges these in the space's order.
struct Outcome {
  enum class Kind { Open, Pruned, Bounded, Tried };
  Kind kind = Kind::Open;  // Open: not decided yet
  Trial point;             // with Tried
  bool balanced = false;   // with Tried: its balanced variant was tried too
  Trial variant;           // that variant, when balanced
  double bound_s = -std::numeric_limits<double>::infinity();  // lower bound on the iteration time
                           // of the point and its variant; -infinity: none known
  std::string shape;       // its schedule shape (the caches' key)
};

// The schedule shape of a plan: schedule, parameters, pp, microbatches, recomputation.
std::string shape_key(const costmodel::ParallelPlan& p);

// The caches of one unit of work; not shared between threads.
class PointWorker {
 public:
  explicit PointWorker(const SearchContext& ctx) : ctx_(ctx) {}
  // Whether the memory bound (planner/bounds.h) drops p at `model`'s precision.
  bool pruned(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p) const;
  // A lower bound on the iteration time of p and of its balanced variant, from their cost tables
  // (no evaluator compiled); -infinity when a check refuses either (run() then says why);
  // infinity when the static memory of both exceeds the GPU's (neither can fit).
  double bound_s(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p);
  // Evaluates p and, where it applies, its balanced variant, into out (kind Tried).
  void run(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p, Outcome& out);
  long compiled() const { return compiled_; }  // evaluators this worker compiled

 private:
  struct Priced;
  Priced price_only(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& q);
  const schedules::Schedule& lowered(const std::string& key, const costmodel::ParallelPlan& p);
  Trial try_plan(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& q);
  Candidate evaluate(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p, bool& fits);
  const SearchContext& ctx_;
  std::map<std::string, std::unique_ptr<costmodel::Evaluator>> evaluators_;
  std::map<std::string, schedules::Schedule> lowered_;
  costmodel::CostTable costs_;  // the last plan evaluated: its cost table
  int stages_ = 0;              // and its stages per pipeline
  long compiled_ = 0;
};

}  // namespace stagecraft::planner
