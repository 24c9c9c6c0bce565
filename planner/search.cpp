#include "planner/search.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "costmodel/flops.h"
#include "costmodel/runtime_support.h"
#include "planner/balance.h"
#include "planner/bounds.h"
#include "schedules/buckets.h"
#include "schedules/error.h"

namespace stagecraft::planner {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

namespace {

// Compiled evaluators by schedule shape: the schedule, its parameters, pp, microbatches,
// recomputation inserted or not, and the gradient buckets per stage. Points enumerated one
// after the other share shapes, so a small cache keeps the reuse.
class EvaluatorCache {
 public:
  const costmodel::Evaluator& get(const std::string& key, const schedules::Schedule& s, SearchStats& stats) {
    if (auto it = cache_.find(key); it != cache_.end()) return *it->second;
    if (cache_.size() >= kMax) cache_.clear();
    ++stats.schedules_compiled;
    return *cache_.emplace(key, std::make_unique<costmodel::Evaluator>(s)).first->second;
  }

 private:
  static constexpr size_t kMax = 16;
  std::map<std::string, std::unique_ptr<costmodel::Evaluator>> cache_;
};

std::string shape_key(const ParallelPlan& p) {
  return p.schedule + "|" + p.schedule_params.dump() + "|" + std::to_string(p.pp) + "|" + std::to_string(p.num_microbatches) +
         "|" + (p.recompute == costmodel::RecomputePolicy::Full ? "R" : "-");
}

// The search's summary of an estimate; fits when its largest peak is within the GPU's memory
// (tight when only within it, not within the usable memory: costmodel::fit_verdict).
Candidate candidate_of(const costmodel::Estimate& e, const ClusterSpec& c, bool& fits) {
  Candidate out;
  out.plan = e.plan;
  out.iteration_time_s = e.eval.iteration_time_s;
  out.tokens_per_s = e.tokens_per_s;
  out.mfu = e.mfu;
  out.hfu = e.hfu;
  out.max_memory_bytes = *std::max_element(e.eval.peak_memory_bytes.begin(), e.eval.peak_memory_bytes.end());
  out.bubble_fraction = e.eval.bubble_fraction;
  out.headroom_bytes = c.usable_memory_bytes() - out.max_memory_bytes;
  out.fit = costmodel::fit_verdict(out.max_memory_bytes, c);
  fits = out.fit != costmodel::Fit::DoesNotFit;  // tight plans are kept, and marked
  return out;
}

// One point as costmodel::estimate evaluates it, with the compiled evaluator from the cache.
// Sets *costs to the point's cost table and *stages to its stages per pipeline.
Candidate evaluate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const costmodel::Profile* profile,
                   EvaluatorCache& cache, std::map<std::string, schedules::Schedule>& lowered, SearchStats& stats, bool& fits,
                   costmodel::CostTable* table, int* stages) {
  const std::string key = shape_key(p);
  auto it = lowered.find(key);
  if (it == lowered.end()) {
    if (lowered.size() >= 16) lowered.clear();
    it = lowered.emplace(key, costmodel::plan_schedule(p)).first;
  }
  *stages = it->second.stages_per_chain();
  costmodel::Estimate e = costmodel::assemble_estimate(
      m, c, p, it->second, profile, [&](const schedules::Schedule& s, const std::string& buckets) -> const costmodel::Evaluator& {
        return cache.get(key + buckets, s, stats);
      });
  Candidate out = candidate_of(e, c, fits);
  *table = std::move(e.costs);
  return out;
}

// The key of one value of a choice: "zero 3", "shard group 8", "cp 2", "fp8".
std::string zero_key(int z) { return "zero " + std::to_string(z); }
std::string shard_key(int g) { return "shard group " + std::to_string(g); }
std::string cp_key(int x) { return "cp " + std::to_string(x); }
std::string ep_key(int x) { return "ep " + std::to_string(x); }
// One precision searched: 16 bits, or FP8 with a recipe.
struct Precision {
  bool fp8 = false;
  costmodel::Fp8Recipe recipe = costmodel::Fp8Recipe::Delayed;
};
std::string precision_key(Precision p) {
  if (!p.fp8) return "bf16";
  return p.recipe == costmodel::Fp8Recipe::Delayed ? "fp8" : "fp8-" + std::string(costmodel::fp8_recipe_name(p.recipe));
}

// The choices of the space with more than one value, each value's key, in the space's order.
std::vector<std::string> choice_keys(const PlanSpace& space, const std::vector<int>& eps, const std::vector<Precision>& precisions) {
  std::vector<std::string> keys;
  if (space.zero.size() > 1)
    for (int z : space.zero) keys.push_back(zero_key(z));
  if (space.shard_groups.size() > 1)
    for (int g : space.shard_groups) keys.push_back(shard_key(g));
  if (space.cp_degrees.size() > 1)
    for (int x : space.cp_degrees) keys.push_back(cp_key(x));
  if (eps.size() > 1)
    for (int x : eps) keys.push_back(ep_key(x));
  if (precisions.size() > 1)
    for (Precision f : precisions) keys.push_back(precision_key(f));
  return keys;
}

// The keys a point belongs to (those of choice_keys).
std::vector<std::string> keys_of(const ParallelPlan& p, Precision fp8, const PlanSpace& space, const std::vector<int>& eps,
                                 const std::vector<Precision>& precisions) {
  std::vector<std::string> keys;
  if (space.zero.size() > 1) keys.push_back(zero_key(p.zero));
  if (space.shard_groups.size() > 1 && p.zero == 3) keys.push_back(shard_key(p.shard_group));
  if (space.cp_degrees.size() > 1) keys.push_back(cp_key(p.cp));
  if (eps.size() > 1) keys.push_back(ep_key(p.ep));
  if (precisions.size() > 1) keys.push_back(precision_key(fp8));
  return keys;
}

// The points of one schedule shape evaluated one after another: the evaluator and lowered-
// schedule caches hold 16 shapes, and the space's own order (tp, pp, cp, ep, b, schedule, ...)
// visits a (tp, pp)'s shapes again for every expert-parallel degree, which thrashed them
// (DeepSeek-V3's default space: 3,112 evaluators compiled for 7,030 evaluations). The order
// changes no price; among plans of equal time the one evaluated first is listed first.
std::vector<ParallelPlan> by_shape(std::vector<ParallelPlan> points) {
  std::vector<std::pair<std::string, size_t>> order;
  order.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) order.emplace_back(shape_key(points[i]), i);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ParallelPlan> sorted;
  sorted.reserve(points.size());
  for (const auto& [key, i] : order) sorted.push_back(std::move(points[i]));
  return sorted;
}

}  // namespace

std::pair<std::string, long> main_rejection(const SearchStats& s) {
  std::pair<std::string, long> out{"", 0};
  for (const auto& [why, n] : s.rejections)
    if (n > out.second) out = {why, n};
  return out;
}

bool ranks_before(const Candidate& a, const Candidate& b) {
  const bool a_fits = a.fit == costmodel::Fit::Fits, b_fits = b.fit == costmodel::Fit::Fits;
  if (a_fits != b_fits) return a_fits;
  return a.iteration_time_s < b.iteration_time_s;
}

SearchResult search(const ModelSpec& m, const ClusterSpec& c, const PlanSpace& space, const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.top_k < 1) throw InputError("plan search: top_k = " + std::to_string(opt.top_k) + " is invalid (must be at least 1)");
  const bool custom = static_cast<bool>(opt.estimate);
  if (!custom) costmodel::check(m);
  costmodel::check(c);
  SearchResult res;
  res.cluster = plan_cluster(c, space);
  // The runtime's refusals (--for-runtime) are made point by point below, each counted with its
  // reason (issue 52: a choice the runtime cannot run showed "no plan fits, 0 of 0").
  check(space, m, c);
  PlanSpace offered = space;
  offered.for_runtime = false;
  std::vector<ParallelPlan> points = enumerate(offered, m, c);
  points = by_shape(std::move(points));
  EvaluatorCache cache;
  std::map<std::string, schedules::Schedule> lowered;
  // Evaluates q and keeps it among the best when it fits; false when a check refuses it.
  costmodel::CostTable costs;
  int stages = 0;
  ModelSpec model = m;  // the model at the precision being searched
  // Each precision of the space over every point (a model already in FP8: FP8 only).
  std::vector<Precision> precisions;
  if (m.fp8 || custom) {
    precisions.push_back({m.fp8, m.fp8_recipe});
  } else {
    for (bool f : space.fp8) {
      if (!f) precisions.push_back({false, costmodel::Fp8Recipe::Delayed});
      if (f)
        for (costmodel::Fp8Recipe r : space.fp8_recipes) precisions.push_back({true, r});
    }
  }
  const std::vector<int> eps = expert_degrees(space, m);
  for (const std::string& k : choice_keys(space, eps, precisions)) res.choices.push_back({k});
  auto choice = [&](const std::string& key) -> ChoiceBest* {
    for (ChoiceBest& c : res.choices)
      if (c.choice == key) return &c;
    return nullptr;
  };
  auto price = [&](const ParallelPlan& q, bool& fits) {
    costmodel::check_fit(model, res.cluster, q);
    // Parameters the cost model chooses (merak alpha1 auto, FOLD3D segments auto and its
    // forward/backward ratio) are settled as `estimate` settles them.
    costmodel::EstimateOptions eo;
    eo.profile = opt.profile;
    const ParallelPlan r = costmodel::resolve_schedule_params(model, res.cluster, q, eo);
    return evaluate(model, res.cluster, r, opt.profile, cache, lowered, res.stats, fits, &costs, &stages);
  };
  auto consider = [&](const ParallelPlan& q) {
    Candidate cand;
    bool fits = false;
    try {
      costmodel::check(q);
      if (space.for_runtime)
        if (const std::string why = costmodel::runtime_refusal(model, q, costmodel::plan_schedule(q)); !why.empty())
          throw InputError(why);
      cand = custom ? candidate_of(opt.estimate(res.cluster, q), res.cluster, fits) : price(q, fits);
      cand.fp8 = model.fp8;
      cand.fp8_recipe = model.fp8_recipe;
    } catch (const InputError& e) {
      const std::string why = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
      ++res.stats.rejections[why];
      for (const std::string& k : keys_of(q, {model.fp8, model.fp8_recipe}, space, eps, precisions))
        if (ChoiceBest* c = choice(k)) {
          ++c->rejected;
          if (c->rejection.empty()) c->rejection = why;
        }
      return false;
    }
    ++res.stats.evaluated;
    for (const std::string& k : keys_of(q, {model.fp8, model.fp8_recipe}, space, eps, precisions))
      if (ChoiceBest* c = choice(k)) {
        ++c->evaluated;
        if (!fits) continue;
        ++(cand.fit == costmodel::Fit::Fits ? c->fitting : c->tight);
        if (!c->best || ranks_before(cand, *c->best)) c->best = cand;
      }
    if (!fits) {
      ++res.stats.infeasible;
      return true;
    }
    if (cand.fit == costmodel::Fit::Tight) ++res.stats.tight;
    res.best.push_back(cand);
    std::stable_sort(res.best.begin(), res.best.end(), ranks_before);
    if (static_cast<int>(res.best.size()) > opt.top_k) res.best.pop_back();
    return true;
  };
  const long total = static_cast<long>(points.size() * precisions.size());
  for (Precision fp8 : precisions) {
    model.fp8 = fp8.fp8;
    model.fp8_recipe = fp8.recipe;
    for (const ParallelPlan& p : points) {
      // Every point: 64 of the expensive ones took 40-50 s with nothing printed (issue 36); the
      // Progress the CLI passes prints at most once every 2 s.
      if (opt.progress) opt.progress(res.stats.considered, total);
      ++res.stats.considered;
      if (opt.prune && !custom && memory_lower_bound_bytes(model, p) > res.cluster.gpu_memory_bytes) {  // tight plans are kept
        ++res.stats.pruned;
        for (const std::string& k : keys_of(p, fp8, space, eps, precisions))
          if (ChoiceBest* c = choice(k)) ++c->pruned;
        continue;
      }
      if (!consider(p)) {
        ++res.stats.rejected;
        continue;
      }
      if (!opt.balance || custom || stages < 2 || !p.stage_layers.empty()) continue;
      // Merak's stage balancing: the same plan with the layers moved away from the embedding
      // and the head, when that changes the partition.
      ParallelPlan q = p;
      q.stage_layers = balance_stages(m.num_layers, stages, stage_time_model(costs, p.recompute == costmodel::RecomputePolicy::Full));
      if (q.stage_layers == costmodel::partition_layers(m, p, stages)) continue;
      if (consider(q)) ++res.stats.balanced;  // counted when evaluated: considered = pruned + rejected + evaluated - balanced
    }
  }
  res.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.progress) opt.progress(res.stats.considered, total);
  return res;
}

}  // namespace stagecraft::planner
