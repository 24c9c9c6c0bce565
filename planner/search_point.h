// One point of the planner's search (planner/search.h), priced and evaluated on one thread:
// what search() does for each point, with the caches the search's threads share (lowered
// schedules by shape for the search, compiled evaluators by shape for one wave of units).
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <string>

#include "costmodel/memo.h"
#include "costmodel/memory_walk.h"
#include "planner/search.h"

namespace stagecraft::planner {

// One precision searched: 16 bits, or FP8 with a recipe.
struct Precision {
  bool fp8 = false;
  costmodel::Fp8Recipe recipe = costmodel::Fp8Recipe::Delayed;
};

// Lowered schedules and their untimed memory (costmodel::UntimedMemory) by schedule shape,
// shared by the search's threads: each built once, kept for the search (references stay valid).
class ShapeCache {
 public:
  struct Entry {
    schedules::Schedule lowered;     // costmodel::plan_schedule of the shape
    costmodel::UntimedMemory memory;  // its memory events, reduced
  };
  const Entry& get(const std::string& key, const costmodel::ParallelPlan& p);

 private:
  costmodel::SharedMemo<std::string, Entry> entries_;
};

// What every point of one search shares, read-only while threads run (the shape cache aside).
struct SearchContext {
  const costmodel::ModelSpec* base = nullptr;  // the model as given (its layers, for balancing)
  costmodel::ClusterSpec cluster;              // the cluster the plans run on (plan_cluster)
  const PlanSpace* space = nullptr;            // the space searched
  const SearchOptions* opt = nullptr;          // the search's options
  bool custom = false;                         // points priced by opt->estimate
  ShapeCache* shapes = nullptr;                // lowered schedules by shape, thread-safe
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

// Compiled evaluators by schedule shape and buckets, shared by the units of one wave: each
// compiled once in the wave, whichever thread asks first, so the count is the threads' own.
using EvaluatorMemo = costmodel::SharedMemo<std::string, costmodel::Evaluator>;

// One unit of work's pricing, on one thread; its caches are the search's, thread-safe.
class PointWorker {
 public:
  PointWorker(const SearchContext& ctx, EvaluatorMemo& evaluators) : ctx_(ctx), evaluators_(evaluators) {}
  // Whether the memory bound (planner/bounds.h) drops p at `model`'s precision.
  bool pruned(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p) const;
  // Sets out.bound_s, a lower bound on the iteration time of p and of its balanced variant, from
  // their cost tables (no evaluator compiled): -infinity when a check refuses either (run() then
  // says why), infinity when the static memory of both exceeds the GPU's (neither can fit). Where
  // the untimed peaks (costmodel::untimed_peak_memory_bytes) show both over the GPU's memory, the
  // point is decided there (kind Tried, as run() would find it): nothing to evaluate.
  void bound(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p, Outcome& out);
  // Evaluates p and, where it applies, its balanced variant, into out (kind Tried).
  void run(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p, Outcome& out);

 private:
  struct Priced;
  Priced price_only(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& q);
  const ShapeCache::Entry& shape(const std::string& key, const costmodel::ParallelPlan& p) { return ctx_.shapes->get(key, p); }
  Trial try_plan(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& q);
  bool known_over_memory(const costmodel::ModelSpec& model, const Priced& a, Trial& t);
  Candidate evaluate(const costmodel::ModelSpec& model, const costmodel::ParallelPlan& p, bool& fits);
  const SearchContext& ctx_;
  EvaluatorMemo& evaluators_;

  costmodel::CostTable costs_;  // the last plan evaluated: its cost table
  int stages_ = 0;              // and its stages per pipeline
};

}  // namespace stagecraft::planner
