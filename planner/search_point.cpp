#include "planner/search_point.h"

#include <algorithm>

#include "costmodel/memory_walk.h"
#include "costmodel/plan_workload.h"
#include "runtime/support/rules.h"
#include "planner/balance.h"
#include "planner/bounds.h"
#include "schedules/error.h"

namespace stagecraft::planner {

using costmodel::ModelSpec;
using costmodel::ParallelPlan;

namespace {

// The search's summary of an estimate; fits when its largest peak is within the GPU's memory
// (tight when only within it, not within the usable memory: costmodel::fit_verdict).
Candidate candidate_of(const costmodel::Estimate& e, const costmodel::ClusterSpec& c, bool& fits) {
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

// A priced plan whose peak memory, known exactly without a timeline where no rank offloads
// (costmodel::UntimedMemory), exceeds the GPU's: its candidate in `out` (memory and verdict only,
// untimed; counted, never ranked).
bool over_memory(const ParallelPlan& p, const costmodel::ClusterSpec& c, const costmodel::CostTable& costs,
                 const costmodel::UntimedMemory& memory, Candidate& out) {
  const std::vector<double> peaks = memory.peaks(costs);
  if (peaks.empty()) return false;
  const double peak = *std::max_element(peaks.begin(), peaks.end());
  if (peak <= c.gpu_memory_bytes) return false;
  out.plan = p;
  out.max_memory_bytes = peak;
  out.headroom_bytes = c.usable_memory_bytes() - peak;
  out.fit = costmodel::Fit::DoesNotFit;
  out.untimed = true;
  return true;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The time bound of one priced plan; infinity when its static memory alone (the cost table's,
// per rank: the evaluator's peaks add activations to it) exceeds the GPU's: it cannot fit.
double bound_of(const schedules::Schedule& lowered, const costmodel::CostTable& costs, const costmodel::ClusterSpec& c) {
  for (double b : costs.static_bytes)
    if (b > c.gpu_memory_bytes) return std::numeric_limits<double>::infinity();
  return iteration_time_lower_bound_s(lowered, costs);
}

}  // namespace

std::string shape_key(const ParallelPlan& p) {
  return p.schedule + "|" + p.schedule_params.dump() + "|" + std::to_string(p.pp) + "|" + std::to_string(p.num_microbatches) +
         "|" + (p.recompute == costmodel::RecomputePolicy::Full ? "R" : "-");
}

bool PointWorker::pruned(const ModelSpec& model, const ParallelPlan& p) const {
  return ctx_.opt->prune && !ctx_.custom && memory_lower_bound_bytes(model, p) > ctx_.cluster.gpu_memory_bytes;
}

const ShapeCache::Entry& ShapeCache::get(const std::string& key, const ParallelPlan& p) {
  return entries_.get(key, [&] {
    schedules::Schedule s = costmodel::plan_schedule(p);
    costmodel::UntimedMemory memory(s);
    return Entry{std::move(s), std::move(memory)};
  });
}

// The checks a point passes before it is priced (as search() made them), and its settled plan.
struct PointWorker::Priced {
  ParallelPlan plan;            // with the schedule parameters the cost model settles
  costmodel::CostTable costs;   // its cost table
  const schedules::Schedule* lowered = nullptr;
};

PointWorker::Priced PointWorker::price_only(const ModelSpec& model, const ParallelPlan& q) {
  costmodel::check(q);
  if (ctx_.space->for_runtime)
    if (const std::string why = runtime::runtime_refusal(model, q, costmodel::plan_schedule(q)); !why.empty())
      throw InputError(why);
  costmodel::check_fit(model, ctx_.cluster, q);
  costmodel::EstimateOptions eo;
  eo.profile = ctx_.opt->profile;
  Priced out;
  out.plan = costmodel::resolve_schedule_params(model, ctx_.cluster, q, eo);
  out.lowered = &shape(shape_key(out.plan), out.plan).lowered;
  const costmodel::PlanWorkload w = costmodel::build_plan_workload(model, ctx_.cluster, out.plan, *out.lowered);
  out.costs = costmodel::price(w, ctx_.cluster, *out.lowered, ctx_.opt->profile);
  return out;
}

// A priced plan whose untimed peak exceeds the GPU's memory, as a trial (what run() would find).
bool PointWorker::known_over_memory(const ModelSpec& model, const Priced& a, Trial& t) {
  if (!over_memory(a.plan, ctx_.cluster, a.costs, shape(shape_key(a.plan), a.plan).memory, t.cand)) return false;
  t.cand.fp8 = model.fp8;
  t.cand.fp8_recipe = model.fp8_recipe;
  t.fits = false;
  return true;
}

void PointWorker::bound(const ModelSpec& model, const ParallelPlan& p, Outcome& o) {
  try {
    const Priced a = price_only(model, p);
    o.bound_s = bound_of(*a.lowered, a.costs, ctx_.cluster);
    Trial point;
    const bool over = !ctx_.custom && known_over_memory(model, a, point);
    const int stages = a.lowered->stages_per_chain();
    ParallelPlan q = p;  // the balanced variant run() also tries
    const bool variant = ctx_.opt->balance && !ctx_.custom && stages >= 2 && p.stage_layers.empty();
    if (variant)
      q.stage_layers = balance_stages(ctx_.base->num_layers, stages,
                                      stage_time_model(a.costs, p.recompute == costmodel::RecomputePolicy::Full));
    if (!variant || q.stage_layers == costmodel::partition_layers(*ctx_.base, p, stages)) {
      if (over) o.kind = Outcome::Kind::Tried, o.point = point;  // decided: no evaluation needed
      return;
    }
    const Priced b = price_only(model, q);
    o.bound_s = std::min(o.bound_s, bound_of(*b.lowered, b.costs, ctx_.cluster));
    Trial balanced;
    if (over && known_over_memory(model, b, balanced))
      o.kind = Outcome::Kind::Tried, o.point = point, o.balanced = true, o.variant = balanced;
  } catch (const InputError&) {
    o.bound_s = -std::numeric_limits<double>::infinity();  // refused: run() counts the refusal
  }
}

// One point as costmodel::estimate evaluates it, with the compiled evaluator from the cache.
// Sets costs_ to the point's cost table and stages_ to its stages per pipeline.
Candidate PointWorker::evaluate(const ModelSpec& model, const ParallelPlan& q, bool& fits) {
  costmodel::check_fit(model, ctx_.cluster, q);
  // Parameters the cost model chooses (merak alpha1 auto, FOLD3D segments auto and its
  // forward/backward ratio) are settled as `estimate` settles them.
  costmodel::EstimateOptions eo;
  eo.profile = ctx_.opt->profile;
  const ParallelPlan p = costmodel::resolve_schedule_params(model, ctx_.cluster, q, eo);
  const std::string key = shape_key(p);
  const ShapeCache::Entry& shaped = shape(key, p);
  const schedules::Schedule& s = shaped.lowered;
  stages_ = s.stages_per_chain();
  costmodel::Estimate priced = costmodel::price_estimate(model, ctx_.cluster, p, s, ctx_.opt->profile);
  if (Candidate over; over_memory(priced.plan, priced.cluster, priced.costs, shaped.memory, over)) {  // exact without a timeline: no evaluator compiled
    costs_ = std::move(priced.costs);
    fits = false;
    return over;
  }
  costmodel::Estimate e = costmodel::evaluate_estimate(
      std::move(priced), s, [&](const schedules::Schedule& b, const std::string& buckets) -> const costmodel::Evaluator& {
        return evaluators_.get(key + buckets, [&] { return costmodel::Evaluator(b); });
      });
  Candidate out = candidate_of(e, ctx_.cluster, fits);
  costs_ = std::move(e.costs);
  return out;
}

Trial PointWorker::try_plan(const ModelSpec& model, const ParallelPlan& q) {
  Trial t;
  try {
    costmodel::check(q);
    if (ctx_.space->for_runtime)
      if (const std::string why = runtime::runtime_refusal(model, q, costmodel::plan_schedule(q)); !why.empty())
        throw InputError(why);
    t.cand = ctx_.custom ? candidate_of(ctx_.opt->estimate(ctx_.cluster, q), ctx_.cluster, t.fits) : evaluate(model, q, t.fits);
    t.cand.fp8 = model.fp8;
    t.cand.fp8_recipe = model.fp8_recipe;
  } catch (const InputError& e) {
    t.rejected = true;
    t.why = first_line(e.what());
  }
  return t;
}

void PointWorker::run(const ModelSpec& model, const ParallelPlan& p, Outcome& out) {
  out.kind = Outcome::Kind::Tried;
  out.point = try_plan(model, p);
  if (out.point.rejected || !ctx_.opt->balance || ctx_.custom || stages_ < 2 || !p.stage_layers.empty()) return;
  // Merak's stage balancing: the same plan with the layers moved away from the embedding
  // and the head, when that changes the partition.
  ParallelPlan q = p;
  q.stage_layers = balance_stages(ctx_.base->num_layers, stages_,
                                  stage_time_model(costs_, p.recompute == costmodel::RecomputePolicy::Full));
  if (q.stage_layers == costmodel::partition_layers(*ctx_.base, p, stages_)) return;
  out.balanced = true;
  out.variant = try_plan(model, q);
}

}  // namespace stagecraft::planner
