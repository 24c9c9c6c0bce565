#include "runtime/optim.h"

#include <cmath>

#include "schedules/error.h"

namespace stagecraft::runtime {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions opt)
    : params_(std::move(params)), opt_(opt) {
  for (const auto& [name, p] : params_) {
    m_.push_back(torch::zeros_like(p));
    v_.push_back(torch::zeros_like(p));
    index_.emplace(p.unsafeGetTensorImpl(), m_.size() - 1);
  }
}

void AdamW::shard(const std::vector<Owned>& owned) {
  sharded_ = true;
  own_.assign(params_.size(), {0, 0});
  for (const Owned& o : owned) {
    const size_t i = index_of(o.param);
    if (o.offset < 0 || o.length < 0 || o.offset + o.length > o.param.numel())
      throw Error("runtime: optimizer shard of " + params_[i].first + " is outside the parameter");
    own_[i] = {o.offset, o.length};
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].second;
    m_[i] = torch::zeros({own_[i].second}, p.options());
    v_[i] = torch::zeros({own_[i].second}, p.options());
  }
}

void AdamW::update(size_t i) {
  const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(step_));
  const double bc2_sqrt = std::sqrt(1 - std::pow(opt_.beta2, static_cast<double>(step_)));
  torch::Tensor param = params_[i].second, p = param;
  torch::Tensor g = p.grad();
  if (!g.defined()) throw Error("runtime: parameter " + params_[i].first + " has no gradient at the optimizer step");
  // The gradient stays allocated, zeroed for the next step's accumulation, as Megatron-LM's
  // gradient buffer does (and as the cost model counts it: resident all the time).
  struct ZeroAfter {
    torch::Tensor& grad;
    ~ZeroAfter() { grad.zero_(); }
  } zero_after{param.mutable_grad()};
  if (sharded_) {  // the owned elements only, as flat views of the parameter and its gradient
    const auto [off, len] = own_[i];
    if (len == 0) return;
    p = p.view({-1}).narrow(0, off, len);
    g = g.reshape({-1}).narrow(0, off, len);
  }
  p.mul_(1 - opt_.lr * opt_.weight_decay);
  m_[i].mul_(opt_.beta1).add_(g, 1 - opt_.beta1);
  v_[i].mul_(opt_.beta2).addcmul_(g, g, 1 - opt_.beta2);
  torch::Tensor denom = (v_[i].sqrt() / bc2_sqrt).add_(opt_.eps);
  p.addcdiv_(m_[i], denom, -opt_.lr / bc1);
}

size_t AdamW::index_of(const torch::Tensor& p) const {
  auto it = index_.find(p.unsafeGetTensorImpl());
  if (it == index_.end()) throw Error("runtime: a tensor the optimizer does not hold was given to update_late");
  return it->second;
}

std::int64_t AdamW::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto* moments : {&m_, &v_})
    for (const torch::Tensor& t : *moments)
      if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

void AdamW::step(const std::vector<torch::Tensor>& later) {
  torch::NoGradGuard no_grad;
  ++step_;
  std::vector<bool> skip(params_.size(), false);
  for (const auto& p : later) skip[index_of(p)] = true;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!skip[i]) update(i);
}

void AdamW::update_late(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) update(index_of(p));
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_elsewhere_) out.emplace_back("param." + params_[i].first, params_[i].second.detach());
    out.emplace_back("adam_m." + params_[i].first, m_[i]);
    out.emplace_back("adam_v." + params_[i].first, v_[i]);
  }
  out.emplace_back("adam_step", torch::tensor(static_cast<int64_t>(step_)));
  return out;
}

void AdamW::load(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  auto get = [&](const std::string& name, const torch::Tensor& like) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error("runtime: checkpoint has no tensor '" + name + "'");
    if (it->second.sizes() != like.sizes())
      throw Error("runtime: checkpoint tensor '" + name + "' has another shape than this run's (different plan?)");
    return it->second;
  };
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_elsewhere_) params_[i].second.copy_(get("param." + params_[i].first, params_[i].second));
    m_[i].copy_(get("adam_m." + params_[i].first, m_[i]));
    v_[i].copy_(get("adam_v." + params_[i].first, v_[i]));
  }
  step_ = get("adam_step", torch::tensor(static_cast<int64_t>(0))).item<int64_t>();
}

}  // namespace stagecraft::runtime
