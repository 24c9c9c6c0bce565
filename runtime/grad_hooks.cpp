#include "runtime/grad_hooks.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

void GradHooks::install(const std::vector<Action>& list) {
  ShareCursor cursor;
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const bool bwd = a.op == Op::B || a.op == Op::W || a.op == Op::OVERLAP_F_B;
    if (bwd) last_backward_[a.op == Op::OVERLAP_F_B ? a.b_stage : a.stage] = i;
    if (a.op == Op::I) last_input_backward_[a.stage] = i;
    if (a.op != Op::REDUCE_GRAD) continue;
    for (auto& params : cutter_.cut(a, cursor))
      if (cutter_.group_of(a.stage, params).size() > 1)  // the others are only scaled, at the REDUCE_GRAD
        buckets_[a.stage].push_back({params, std::vector<torch::Tensor>(params.size()), 0, false, i});
  }
  register_hooks();
}

void GradHooks::register_hooks() {
  for (auto& [stage, list_of] : buckets_)
    for (size_t b = 0; b < list_of.size(); ++b)
      for (size_t k = 0; k < list_of[b].params.size(); ++k) {
        torch::Tensor p = list_of[b].params[k];
        const int st = stage;
        p.register_hook([this, st, b, k](torch::Tensor g) { on_grad(st, b, k, g); });
        slot_[p.unsafeGetTensorImpl()] = {b, k};
      }
}

void GradHooks::arm(const Action& a, size_t span) {
  const int st = a.op == Op::OVERLAP_F_B ? a.b_stage : a.stage;
  auto lb = last_backward_.find(st);
  auto li = last_input_backward_.find(st);
  const bool last = (lb != last_backward_.end() && lb->second == span) || (li != last_input_backward_.end() && li->second == span);
  armed_stage_ = last ? st : -1;
}

WeightGradHook GradHooks::weight_hook(int stage) {
  return [this, stage](const torch::Tensor& w, const torch::Tensor& g) {
    if (auto s = slot_.find(w.unsafeGetTensorImpl()); s != slot_.end()) on_grad(stage, s->second.first, s->second.second, g);
  };
}

bool GradHooks::take_started(int stage, const std::vector<torch::Tensor>& params) {
  auto it = buckets_.find(stage);
  if (it == buckets_.end()) return false;
  for (HookBucket& hb : it->second) {
    if (hb.params.empty() || !hb.params.front().is_same(params.front())) continue;
    const bool started = hb.started;
    hb = HookBucket{hb.params, std::vector<torch::Tensor>(hb.params.size()), 0, false, hb.span};
    return started;
  }
  return false;
}

void GradHooks::on_grad(int stage, size_t b, size_t k, const torch::Tensor& g) {
  if (armed_stage_ != stage) return;
  HookBucket& hb = buckets_[stage][b];
  if (hb.started) return;
  const torch::Tensor& p = hb.params[k];
  if (!hb.totals[k].defined()) ++hb.ready;
  torch::NoGradGuard ng;
  hb.totals[k] = p.grad().defined() ? p.grad() + g : g.clone();
  if (hb.ready < static_cast<int>(hb.params.size())) return;
  std::vector<torch::Tensor> flat;
  for (const auto& t : hb.totals) flat.push_back(t.reshape({-1}));
  GradBucket bk;
  bk.flat = torch::cat(flat);
  bk.params = hb.params;
  bk.group = &cutter_.group_of(stage, hb.params);
  bk.span = hb.span;
  launch_(std::move(bk));
  hb.started = true;
  hb.totals.assign(hb.params.size(), torch::Tensor());
}

}  // namespace stagecraft::runtime
