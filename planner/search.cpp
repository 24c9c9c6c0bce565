#include "planner/search.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>

#include "planner/parallel.h"
#include "planner/search_point.h"
#include "schedules/error.h"

namespace stagecraft::planner {

using costmodel::ClusterSpec;
using costmodel::ModelSpec;
using costmodel::ParallelPlan;

namespace {

// Points a unit of work holds at most (a run of one schedule shape is cut into units of this
// many), and points evaluated by branch and bound's pilot and in each of its waves. Fixed, not from the thread count:
// what a search compiles and cuts is the same on any number of threads.
constexpr size_t kUnitPoints = 8;
constexpr size_t kPilotPoints = 128;
constexpr size_t kWavePoints = 512;

// The key of one value of a choice: "zero 3", "shard group 8", "cp 2", "fp8".
std::string zero_key(int z) { return "zero " + std::to_string(z); }
std::string shard_key(int g) { return "shard group " + std::to_string(g); }
std::string cp_key(int x) { return "cp " + std::to_string(x); }
std::string ep_key(int x) { return "ep " + std::to_string(x); }
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

// The precisions searched: each of the space's over every point (a model already in FP8, or
// one priced by a custom estimate: its own only).
std::vector<Precision> precisions_of(const ModelSpec& m, const PlanSpace& space, bool custom) {
  std::vector<Precision> out;
  if (m.fp8 || custom) {
    out.push_back({m.fp8, m.fp8_recipe});
    return out;
  }
  for (bool f : space.fp8) {
    if (!f) out.push_back({false, costmodel::Fp8Recipe::Delayed});
    if (f)
      for (costmodel::Fp8Recipe r : space.fp8_recipes) out.push_back({true, r});
  }
  return out;
}

}  // namespace

namespace {

// One search under way: its points at each precision (a task: precision-major, then the points
// in shape order), what became of each, and the merge of those outcomes into the result.
class Search {
 public:
  Search(const ModelSpec& m, const PlanSpace& space, const SearchOptions& opt, SearchResult& res)
      : m_(m), space_(space), opt_(opt), res_(res) {}
  void run(const ClusterSpec& c);

 private:
  size_t tasks() const { return points_.size() * precisions_.size(); }
  const ParallelPlan& point(size_t t) const { return points_[t % points_.size()]; }
  const ModelSpec& model(size_t t) const { return models_[t / points_.size()]; }
  void report(long n);
  void run_units(const std::vector<std::vector<size_t>>& units, bool bound_only);
  std::vector<std::vector<size_t>> shape_units(const std::vector<size_t>& tasks) const;
  void branch_and_bound();
  void evaluate_wave(const std::vector<size_t>& wave);
  bool cut(size_t t, double overall_s, const std::vector<double>& choice_s) const;
  void thresholds(double& overall_s, std::vector<double>& choice_s) const;
  bool apply(const Trial& trial, const std::vector<int>& choices);
  void merge();

  const ModelSpec& m_;
  const PlanSpace& space_;
  const SearchOptions& opt_;
  SearchResult& res_;
  SearchContext ctx_;
  ShapeCache shapes_;                          // lowered schedules by shape, for every thread
  std::vector<ParallelPlan> points_;
  std::vector<Precision> precisions_;
  std::vector<ModelSpec> models_;              // the model at each precision
  std::vector<std::vector<int>> choices_;      // per task: its choices' indices in res_.choices
  std::vector<Outcome> outcomes_;              // per task
  int threads_ = 1;
  std::mutex mu_;                              // guards what follows
  long done_ = 0;                              // tasks decided, for the progress callback
  long compiled_ = 0;                          // evaluators compiled, over every wave
};

void Search::report(long n) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  if (opt_.progress) opt_.progress(done_, static_cast<long>(tasks()));
}

// Units of work: runs of tasks of one precision and one schedule shape, at most kUnitPoints each.
std::vector<std::vector<size_t>> Search::shape_units(const std::vector<size_t>& tasks) const {
  std::vector<std::vector<size_t>> units;
  for (size_t t : tasks) {
    const bool joins = !units.empty() && units.back().size() < kUnitPoints && units.back().back() / points_.size() == t / points_.size() &&
                       outcomes_[units.back().back()].shape == outcomes_[t].shape;
    if (!joins) units.emplace_back();
    units.back().push_back(t);
  }
  return units;
}

// Runs each unit on one worker: the memory bound, then the time bound only (bound_only) or the
// evaluation of the tasks still open.
void Search::run_units(const std::vector<std::vector<size_t>>& units, bool bound_only) {
  // The largest units first, so that the threads finish together, and among equals each shape's
  // first unit before any shape's second, so that threads side by side seldom wait on one shape's
  // lowering or evaluator (each unit's outcomes are its own whatever the order; the merge keeps
  // the space's order).
  std::vector<size_t> nth(units.size(), 0);  // the unit's place among its shape's units
  for (size_t u = 1; u < units.size(); ++u)
    if (outcomes_[units[u].front()].shape == outcomes_[units[u - 1].front()].shape) nth[u] = nth[u - 1] + 1;
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (units[a].size() != units[b].size()) return units[a].size() > units[b].size();
    return nth[a] < nth[b];
  });
  EvaluatorMemo evaluators;  // this wave's, shared by its units
  planner::run_units(units.size(), threads_, [&](size_t i) {
    const size_t u = order[i];
    PointWorker worker(ctx_, evaluators);
    for (size_t t : units[u]) {
      Outcome& o = outcomes_[t];
      if (o.kind == Outcome::Kind::Open && worker.pruned(model(t), point(t))) {
        o.kind = Outcome::Kind::Pruned;
        report(1);
      }
      if (o.kind != Outcome::Kind::Open) continue;
      if (bound_only) {
        worker.bound(model(t), point(t), o);
        if (o.kind == Outcome::Kind::Tried) report(1);
        continue;
      }
      worker.run(model(t), point(t), o);
      report(1);
    }
  });
  compiled_ += static_cast<long>(evaluators.size());
}

// The times a plan must beat to matter: the k-th fastest plan that fits among those evaluated
// (infinity until k fit), and each choice's fastest that fits (infinity until one does). A plan
// slower than both cannot enter the top k nor become a choice's best: a tight or larger plan
// ranks after every plan that fits, and ties keep the plan met first.
void Search::thresholds(double& overall_s, std::vector<double>& choice_s) const {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> fitting;
  choice_s.assign(res_.choices.size(), inf);
  for (size_t t = 0; t < outcomes_.size(); ++t) {
    const Outcome& o = outcomes_[t];
    if (o.kind != Outcome::Kind::Tried) continue;
    for (const Trial* trial : {&o.point, o.balanced ? &o.variant : nullptr}) {
      if (!trial || trial->rejected || trial->cand.fit != costmodel::Fit::Fits) continue;
      fitting.push_back(trial->cand.iteration_time_s);
      for (int c : choices_[t]) choice_s[static_cast<size_t>(c)] = std::min(choice_s[static_cast<size_t>(c)], trial->cand.iteration_time_s);
    }
  }
  const size_t k = static_cast<size_t>(opt_.top_k);
  overall_s = inf;
  if (fitting.size() < k) return;
  std::nth_element(fitting.begin(), fitting.begin() + static_cast<long>(k - 1), fitting.end());
  overall_s = fitting[k - 1];
}

bool Search::cut(size_t t, double overall_s, const std::vector<double>& choice_s) const {
  const double b = outcomes_[t].bound_s;
  if (b == std::numeric_limits<double>::infinity()) return true;  // cannot fit: never kept
  if (!(b > overall_s)) return false;
  for (int c : choices_[t])
    if (!(b > choice_s[static_cast<size_t>(c)])) return false;
  return true;
}

// Branch and bound: every open task's time bound first; then a pilot round of the kPilotPoints
// tasks with the lowest bounds, evaluated to set the thresholds; then the rest in the space's
// order (shape by shape, so that evaluators are reused) in waves of kWavePoints, each wave's
// thresholds from the waves before it. A task whose bound exceeds them is cut; the thresholds
// only fall, so it stays cut. The waves depend on the bounds and the times alone, not on the
// threads.
void Search::branch_and_bound() {
  std::vector<size_t> all(tasks());
  std::iota(all.begin(), all.end(), size_t{0});
  run_units(shape_units(all), true);
  std::vector<size_t> pilot;
  for (size_t t : all)
    if (outcomes_[t].kind == Outcome::Kind::Open) pilot.push_back(t);
  std::stable_sort(pilot.begin(), pilot.end(), [&](size_t a, size_t b) { return outcomes_[a].bound_s < outcomes_[b].bound_s; });
  pilot.resize(std::min(pilot.size(), kPilotPoints));
  std::sort(pilot.begin(), pilot.end());  // the space's order: units of one shape
  evaluate_wave(pilot);
  for (size_t first = 0; first < all.size(); first += kWavePoints)
    evaluate_wave(std::vector<size_t>(all.begin() + static_cast<long>(first),
                                      all.begin() + static_cast<long>(std::min(all.size(), first + kWavePoints))));
}

// The open tasks among `wave` that the thresholds so far do not cut, evaluated; the others cut.
void Search::evaluate_wave(const std::vector<size_t>& wave) {
  double overall_s = 0;
  std::vector<double> choice_s;
  thresholds(overall_s, choice_s);
  std::vector<size_t> open;
  long cut_now = 0;
  for (size_t t : wave) {
    if (outcomes_[t].kind != Outcome::Kind::Open) continue;
    if (!cut(t, overall_s, choice_s)) {
      open.push_back(t);
      continue;
    }
    outcomes_[t].kind = Outcome::Kind::Bounded;
    ++cut_now;
  }
  report(cut_now);
  run_units(shape_units(open), false);
}

// One trial into the statistics, its choices and the best plans, as the search meets it; false
// when a check refused it.
bool Search::apply(const Trial& trial, const std::vector<int>& choices) {
  if (trial.rejected) {
    ++res_.stats.rejections[trial.why];
    for (int i : choices) {
      ChoiceBest& c = res_.choices[static_cast<size_t>(i)];
      ++c.rejected;
      if (c.rejection.empty()) c.rejection = trial.why;
    }
    return false;
  }
  const Candidate& cand = trial.cand;
  ++res_.stats.evaluated;
  for (int i : choices) {
    ChoiceBest& c = res_.choices[static_cast<size_t>(i)];
    ++c.evaluated;
    if (!trial.fits) continue;
    ++(cand.fit == costmodel::Fit::Fits ? c.fitting : c.tight);
    if (!c.best || ranks_before(cand, *c.best)) c.best = cand;
  }
  if (!trial.fits) {
    ++res_.stats.infeasible;
    if (cand.untimed) ++res_.stats.untimed;
    return true;
  }
  if (cand.fit == costmodel::Fit::Tight) ++res_.stats.tight;
  res_.best.push_back(cand);
  std::stable_sort(res_.best.begin(), res_.best.end(), ranks_before);
  if (static_cast<int>(res_.best.size()) > opt_.top_k) res_.best.pop_back();
  return true;
}

// The outcomes in the space's order (precision, then point), as one thread would meet them.
void Search::merge() {
  SearchStats& s = res_.stats;
  for (size_t t = 0; t < tasks(); ++t) {
    const Outcome& o = outcomes_[t];
    ++s.considered;
    if (o.kind == Outcome::Kind::Pruned || o.kind == Outcome::Kind::Bounded) {
      ++(o.kind == Outcome::Kind::Pruned ? s.pruned : s.bounded);
      for (int i : choices_[t]) ++(o.kind == Outcome::Kind::Pruned ? res_.choices[static_cast<size_t>(i)].pruned
                                                                 : res_.choices[static_cast<size_t>(i)].bounded);
      continue;
    }
    if (!apply(o.point, choices_[t])) {
      ++s.rejected;
      continue;
    }
    if (o.balanced && apply(o.variant, choices_[t])) ++s.balanced;  // considered = pruned + bounded + rejected + evaluated - balanced
  }
  s.schedules_compiled = compiled_;
}

void Search::run(const ClusterSpec& c) {
  ctx_.custom = static_cast<bool>(opt_.estimate);
  ctx_.shapes = &shapes_;
  ctx_.base = &m_;
  ctx_.cluster = res_.cluster;
  ctx_.space = &space_;
  ctx_.opt = &opt_;
  threads_ = search_threads(opt_.threads);
  PlanSpace offered = space_;
  offered.for_runtime = false;  // the runtime's refusals are counted point by point (issue 52)
  points_ = by_shape(enumerate(offered, m_, c));
  precisions_ = precisions_of(m_, space_, ctx_.custom);
  const std::vector<int> eps = expert_degrees(space_, m_);
  for (const std::string& k : choice_keys(space_, eps, precisions_)) res_.choices.push_back({k});
  for (Precision f : precisions_) {
    models_.push_back(m_);
    models_.back().fp8 = f.fp8;
    models_.back().fp8_recipe = f.recipe;
  }
  outcomes_.resize(tasks());
  choices_.resize(tasks());
  for (size_t t = 0; t < tasks(); ++t) {
    outcomes_[t].shape = shape_key(point(t));
    for (const std::string& k : keys_of(point(t), precisions_[t / points_.size()], space_, eps, precisions_))
      for (size_t i = 0; i < res_.choices.size(); ++i)
        if (res_.choices[i].choice == k) choices_[t].push_back(static_cast<int>(i));
  }
  if (opt_.progress) opt_.progress(0, static_cast<long>(tasks()));
  if (opt_.bound && !ctx_.custom && tasks() > 0) {
    branch_and_bound();
  } else {
    std::vector<size_t> all(tasks());
    std::iota(all.begin(), all.end(), size_t{0});
    run_units(shape_units(all), false);
  }
  merge();
}

}  // namespace

std::pair<std::string, long> main_rejection(const SearchStats& s) {
  std::pair<std::string, long> out{"", 0};
  for (const auto& [why, n] : s.rejections)
    if (n > out.second) out = {why, n};
  return out;
}

costmodel::Estimate estimate_candidate(const ModelSpec& m, const ClusterSpec& c, const Candidate& cand) {
  ModelSpec at = m;
  at.fp8 = cand.fp8;
  at.fp8_recipe = cand.fp8_recipe;
  return costmodel::estimate(at, c, cand.plan);
}

bool ranks_before(const Candidate& a, const Candidate& b) {
  const bool a_fits = a.fit == costmodel::Fit::Fits, b_fits = b.fit == costmodel::Fit::Fits;
  if (a_fits != b_fits) return a_fits;
  return a.iteration_time_s < b.iteration_time_s;
}

SearchResult search(const ModelSpec& m, const ClusterSpec& c, const PlanSpace& space, const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.top_k < 1) throw InputError("plan search: top_k = " + std::to_string(opt.top_k) + " is invalid (must be at least 1)");
  if (opt.threads < 0) throw InputError("plan search: threads = " + std::to_string(opt.threads) + " is invalid (0: every core, or at least 1)");
  if (!opt.estimate) costmodel::check(m);
  costmodel::check(c);
  SearchResult res;
  res.cluster = plan_cluster(c, space);
  check(space, m, c);
  Search(m, space, opt, res).run(c);
  res.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.progress) opt.progress(res.stats.considered, res.stats.considered);
  return res;
}

}  // namespace stagecraft::planner
