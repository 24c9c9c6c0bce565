#include "runtime/grad_reduction.h"

#include <limits>

#include "schedules/buckets.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

GradReduction::GradReduction(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts, AdamW* opt,
                             const std::vector<Action>& list, ExecAccounting& acc)
    : cfg_(cfg), parts_(parts), opt_(opt), acc_(acc), cutter_(cfg, parts), zero_(cfg, parts, opt, cutter_, acc),
      hooks_(cutter_, [this](GradBucket b) {
        launch(*b.group, b);
        buckets_.push_back(std::move(b));
        ++acc_.rec().buckets_in_backward;
      }) {
  const std::vector<bool> deferred = schedules::deferred_reductions(list);
  for (size_t i = 0; i < list.size(); ++i)
    if (deferred[i]) deferred_reduce_.insert(i);
  if (cfg_.zero > 0 && cfg_.dp->size() > 1) zero_.shard(list);
  // Hooks only where each bucket is one all-reduce over dp at the stage's last backward: not for
  // deferred shares, the chains' joint reductions, or zero's reduce-scatters at the step.
  const bool hookable = deferred_reduce_.empty() && cfg_.grad_groups.empty() && cfg_.zero == 0 && cfg_.dp->size() > 1;
  if (cfg_.overlap_grad_reduce && hookable) hooks_.install(list);
  if (cfg_.preemptive_comm && cfg_.dp->size() > 1) {
    PreemptOptions po;
    po.timeout = cfg_.timeout;
    reducer_ = std::make_unique<PreemptiveReducer>(po);
  }
}

void GradReduction::reduce_grad(const Action& a, size_t span) {
  GradShare share = cutter_.cut(a, cursor_);
  if (deferred_reduce_.count(span)) return reduce_deferred(a.stage, share, span);
  for (const auto& params : share) {
    if (hooks_.take_started(a.stage, params)) continue;  // launched by the gradient hooks during the backward
    start_bucket(params, span, a.stage, buckets_);
  }
}

// FOLD3D's deferred share (schedules/buckets.h, deferred_reductions): placed before the
// stage's first compute, it reduces the previous iteration's gradients of these parameters,
// which that iteration's OPTIMIZER skipped. The all-reduce starts here and runs beside the
// compute that follows; the stage's first compute waits for it and applies the update
// (finish_late) before reading the parameters, so the training equals synchronous data
// parallelism. This share of this iteration waits in turn.
void GradReduction::reduce_deferred(int stage, const GradShare& share, size_t span) {
  if (late_stages_.erase(stage)) {
    LateShare& l = awaiting_[stage];
    for (const auto& b : share) {
      start_bucket(b, span, stage, l.buckets);
      l.params.insert(l.params.end(), b.begin(), b.end());
    }
  }
  held_.emplace_back(stage, share);
}

void GradReduction::finish_late(int stage) {
  auto it = awaiting_.find(stage);
  if (it == awaiting_.end()) return;
  finish_reductions(it->second.buckets);
  opt_->update_late(it->second.params);
  awaiting_.erase(it);
}

void GradReduction::apply_late(int stage, const GradShare& share, size_t span) {
  std::vector<GradBucket> now;
  std::vector<torch::Tensor> params;
  for (const auto& b : share) {
    start_bucket(b, span, stage, now);
    params.insert(params.end(), b.begin(), b.end());
  }
  finish_reductions(now);
  opt_->update_late(params);
}

void GradReduction::flush() {
  zero_.finish_gathers(-1);
  for (const auto& [stage, share] : late_)
    if (late_stages_.erase(stage)) apply_late(stage, share, std::numeric_limits<size_t>::max());
  late_.clear();
}

// The bucket's all-reduce: one asynchronous call, or queued chunk by chunk behind the sends.
void GradReduction::launch(compat::Group& g, GradBucket& b) {
  if (reducer_) b.job = reducer_->submit(g, b.flat);
  else b.work = compat::all_reduce_sum(g, b.flat);
}

void GradReduction::track_send(const compat::WorkPtr& send) {
  if (reducer_) reducer_->track_send(send);
}

void GradReduction::start_bucket(const std::vector<torch::Tensor>& params, size_t span, int stage,
                                 std::vector<GradBucket>& into) {
  compat::Group& g = cutter_.group_of(stage, params);
  if (g.size() == 1) {  // nothing to sum; routed experts with dp = ep still average over dp
    if (cfg_.dp->size() > 1) {
      torch::NoGradGuard ng;
      for (const auto& p : params)
        if (p.grad().defined()) p.mutable_grad().mul_(1.0 / cfg_.dp->size());
    }
    return;
  }
  MemoryScope scope(MemCategory::Communication);
  std::vector<torch::Tensor> flat;
  for (const auto& p : params) {
    if (!p.grad().defined()) {
      p.mutable_grad() = torch::zeros_like(p);
      tag_tensor(p.grad(), MemCategory::Gradients);
    }
    flat.push_back(p.grad().reshape({-1}));
  }
  GradBucket b;
  b.flat = torch::cat(flat);
  b.params = params;
  b.group = &g;
  b.span = span;
  b.stage = stage;
  if (cfg_.zero == 0) launch(g, b);  // zero: reduce-scattered when finished
  into.push_back(std::move(b));
}

// Sums over dp (and over the copies of a part in several chains), then divides by dp: the
// copies' gradients are partial sums over their chain's microbatches.
void GradReduction::finish_reductions(std::vector<GradBucket>& list) {
  MemoryScope scope(MemCategory::Communication);
  const double inv = 1.0 / cfg_.dp->size();
  for (GradBucket& b : list) {
    if (cfg_.zero > 0) {
      zero_.reduce_scatter(b);
      continue;
    }
    wait_all_reduce(b);
    torch::NoGradGuard ng;
    int64_t off = 0;
    for (auto& p : b.params) {
      p.mutable_grad().copy_(b.flat.narrow(0, off, p.numel()).view_as(p) * inv);
      off += p.numel();
    }
  }
  list.clear();
}

void GradReduction::wait_all_reduce(GradBucket& b) {
  auto a = ExecClock::now();
  try {
    if (b.job) b.job->wait(cfg_.timeout);
    else compat::wait(b.work, cfg_.timeout);
  } catch (const std::exception& e) {
    comm_failure(cfg_.global_rank, "gradient all-reduce in the " + b.group->name, -1, e);
  }
  acc_.add_wait_s(seconds_between(a, ExecClock::now()));
  acc_.close_span(b.span);
}

void GradReduction::finish_for_step() {
  while (!awaiting_.empty()) finish_late(awaiting_.begin()->first);  // a deferred share no compute waited for
  finish_reductions(buckets_);
}

// The shares this iteration deferred (FOLD3D): skipped by this step, applied at the stage's
// next first compute (or by flush); their parameters, which the step counts but leaves.
std::vector<torch::Tensor> GradReduction::hold_deferred() {
  std::vector<torch::Tensor> later;
  for (const auto& [stage, share] : held_) {
    late_stages_.insert(stage);
    for (const auto& b : share) later.insert(later.end(), b.begin(), b.end());
  }
  late_ = std::move(held_);
  held_.clear();
  return later;
}

torch::Tensor GradReduction::step() {
  for (const auto& [stage, share] : cursor_.share)
    if (share < 1.0 - 1e-9) throw Error("runtime: stage " + std::to_string(stage) + " reduced only " + std::to_string(share) + " of its gradients");
  cursor_ = ShareCursor{};
  std::vector<torch::Tensor> later = hold_deferred();
  if (cfg_.precision != Precision::Fp32) clear_autocast_cache();
  torch::Tensor grad_sq = squared_gradients();
  if (zero_.fsdp()) zero_.step_units(std::move(later));  // the step counted, then applied unit by unit to the chunks
  else opt_->step(later);
  if (cfg_.zero > 0) zero_.gather_parameters();
  return grad_sq;
}

// Sum of the squared gradients of every parameter this rank holds (no host sync on a GPU); with
// zero each member holds the reduced gradients of its chunks only.
torch::Tensor GradReduction::squared_gradients() const {
  if (zero_.sharded()) return zero_.squared_gradients();
  torch::NoGradGuard ng;
  torch::Tensor acc = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(cfg_.device));
  for (const auto& [stage, P] : parts_)
    for (const auto& np : P->named_parameters())
      if (np.second.grad().defined()) acc += np.second.grad().to(torch::kFloat64).pow(2).sum();
  return acc;
}

void GradReduction::count_preemption(StepRecord& rec) {
  if (!reducer_) return;
  const PreemptStats now = reducer_->stats();
  rec.preempt_chunks = now.chunks - reducer_seen_.chunks;
  rec.preempt_yields = now.yields - reducer_seen_.yields;
  rec.preempt_expired = now.expired - reducer_seen_.expired;
  rec.preempt_yield_s = now.yield_s - reducer_seen_.yield_s;
  reducer_seen_ = now;
}

}  // namespace stagecraft::runtime
