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

namespace {

// The update's operands: parameter, gradient, moments, each flat or shaped alike.
struct Operands {
  std::vector<torch::Tensor> p, g, m, v;
};

// AdamW's update (Loshchilov and Hutter, Algorithm 2; torch.optim.AdamW): decay, both moments,
// then the bias-corrected step, each operation over every operand at once (ATen's _foreach_*).
// `bc1` = 1 - beta1^t, `bc2_sqrt` = sqrt(1 - beta2^t).
void update_foreach(Operands& o, const AdamWOptions& a, double bc1, double bc2_sqrt) {
  at::_foreach_mul_(o.p, 1 - a.lr * a.weight_decay);
  at::_foreach_mul_(o.m, a.beta1);
  at::_foreach_add_(o.m, o.g, 1 - a.beta1);
  at::_foreach_mul_(o.v, a.beta2);
  at::_foreach_addcmul_(o.v, o.g, o.g, 1 - a.beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(o.v);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, a.eps);
  at::_foreach_addcdiv_(o.p, o.m, denom, -a.lr / bc1);
}

// The same update one parameter at a time (each operation launched per parameter).
void update_loop(const Operands& o, const AdamWOptions& a, double bc1, double bc2_sqrt) {
  for (size_t k = 0; k < o.p.size(); ++k) {
    Operands one{{o.p[k]}, {o.g[k]}, {o.m[k]}, {o.v[k]}};
    update_foreach(one, a, bc1, bc2_sqrt);
  }
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define STAGECRAFT_FUSED_ADAMW 1
// One kernel: the step count travels as a tensor on the parameters' device, as
// torch.optim.AdamW(fused=True) keeps it (one per parameter; here one shared).
void update_fused(Operands& o, const AdamWOptions& a, long step) {
  torch::Tensor t = torch::full({}, static_cast<double>(step), o.p.front().options().dtype(torch::kFloat32));
  std::vector<torch::Tensor> steps(o.p.size(), t), none;
  at::_fused_adamw_(o.p, o.g, o.m, o.v, none, steps, a.lr, a.beta1, a.beta2, a.weight_decay, a.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
}
#endif

}  // namespace

AdamWKernel parse_adamw_kernel(const std::string& s) {
  if (s == "loop") return AdamWKernel::Loop;
  if (s == "foreach") return AdamWKernel::Foreach;
  if (s == "fused") return AdamWKernel::Fused;
  throw InputError("--adamw '" + s + "' is invalid (allowed: loop, foreach, fused)");
}

bool fused_adamw_available(const torch::Device& device) {
#if defined(STAGECRAFT_FUSED_ADAMW)
  return device.is_cuda() || TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4;
#else
  (void)device;
  return false;
#endif
}

void AdamW::update(const std::vector<size_t>& idx) {
  const double bc1 = 1 - std::pow(opt_.beta1, static_cast<double>(step_));
  const double bc2_sqrt = std::sqrt(1 - std::pow(opt_.beta2, static_cast<double>(step_)));
  Operands o;
  for (size_t i : idx) {
    torch::Tensor p = params_[i].second, g = p.grad();
    if (!g.defined()) throw Error("runtime: parameter " + params_[i].first + " has no gradient at the optimizer step");
    if (sharded_) {  // the owned elements only, as flat views of the parameter and its gradient
      const auto [off, len] = own_[i];
      if (len == 0) continue;
      p = p.view({-1}).narrow(0, off, len);
      g = g.reshape({-1}).narrow(0, off, len);
    }
    o.p.push_back(p), o.g.push_back(g), o.m.push_back(m_[i]), o.v.push_back(v_[i]);
  }
  if (!o.p.empty()) {
    switch (opt_.kernel) {
      case AdamWKernel::Loop: update_loop(o, opt_, bc1, bc2_sqrt); break;
      case AdamWKernel::Foreach: update_foreach(o, opt_, bc1, bc2_sqrt); break;
      case AdamWKernel::Fused:
#if defined(STAGECRAFT_FUSED_ADAMW)
        update_fused(o, opt_, step_);
        break;
#else
        throw InputError("--adamw fused: this build's LibTorch (" TORCH_VERSION ") has no at::_fused_adamw_ (2.1 or later)");
#endif
    }
  }
  // The gradients stay allocated, zeroed for the next step's accumulation, as Megatron-LM's
  // gradient buffer does (and as the cost model counts them: resident all the time).
  for (size_t i : idx) params_[i].second.mutable_grad().zero_();
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
  std::vector<size_t> now;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!skip[i]) now.push_back(i);
  update(now);
}

void AdamW::update_late(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<size_t> idx;
  for (const auto& p : params) idx.push_back(index_of(p));
  update(idx);
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
