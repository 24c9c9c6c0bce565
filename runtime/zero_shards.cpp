#include "runtime/zero_shards.h"

#include <algorithm>

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

ZeroShards::~ZeroShards() {
  if (fsdp_ && fsdp_params() == fsdp_.get()) fsdp_params() = nullptr;
}

void ZeroShards::shard(const std::vector<Action>& list) {
  ShareCursor cursor;
  std::vector<AdamW::Owned> owned;
  if (cfg_.zero == 3) {
    ShardedParams::Options fo;
    fo.group = &cutter_.shard_group();
    fo.timeout = cfg_.timeout;
    fo.reshard_after_forward = cfg_.reshard_after_forward;
    fsdp_ = std::make_unique<ShardedParams>(fo);
  }
  for (const Action& a : list) {
    if (a.op != Op::REDUCE_GRAD) continue;
    for (const auto& params : cutter_.cut(a, cursor)) {
      int64_t n = 0;
      for (const auto& p : params) n += p.numel();
      const auto [lo, len] = cutter_.chunk_of(n);
      if (fsdp_) fsdp_->add_bucket(fsdp_unit_of(name_of(a.stage, params.front())), params, lo, len);
      for_each_owned(params, lo, len, [&](const torch::Tensor& p, int64_t at, int64_t, int64_t count) {
        owned.push_back({p, at, count});
      });
    }
  }
  {
    MemoryScope states(MemCategory::OptimizerStates);  // the sharded moments replace the whole ones
    opt_->shard(owned);
  }
  shards_ = std::move(owned);
  if (fsdp_) {
    opt_->keep_params_elsewhere();  // checkpoints take the chunks from sharded_state()
    fsdp_->shard();
    fsdp_params() = fsdp_.get();
  }
}

const std::string& ZeroShards::name_of(int stage, const torch::Tensor& p) const {
  for (const auto& np : part_of(parts_, stage, cfg_.global_rank).named_parameters())
    if (np.second.is_same(p)) return np.first;
  throw Error("runtime: a parameter of stage " + std::to_string(stage) + " has no name");
}

void ZeroShards::reduce_scatter(GradBucket& b) {
  auto a = ExecClock::now();
  try {
    reduce_scatter_bucket(b);
  } catch (const std::exception& e) {
    comm_failure(cfg_.global_rank, "gradient reduce-scatter in the " + b.group->name, -1, e);
  }
  acc_.add_wait_s(seconds_between(a, ExecClock::now()));
  acc_.close_span(b.span);
  gathers_.push_back(std::move(b));
}

// Reduce-scatters the bucket, averages this member's chunk into its gradients.
void ZeroShards::reduce_scatter_bucket(GradBucket& b) {
  compat::Group& g = *b.group;
  const int64_t n = b.flat.numel();
  const auto [lo, len] = cutter_.chunk_of(n);
  torch::Tensor padded = torch::zeros({len * g.size()}, b.flat.options());
  padded.narrow(0, 0, n).copy_(b.flat);
  torch::Tensor mine = torch::empty({len}, b.flat.options());
  compat::reduce_scatter_sum(g, padded, mine, cfg_.timeout);
  // Hybrid sharding: the chunk's sums of the other shard groups (FSDP's HYBRID_SHARD all-reduce).
  if (cfg_.replicate && cfg_.replicate->size() > 1) compat::all_reduce_sum_blocking(*cfg_.replicate, mine, cfg_.timeout);
  mine.mul_(1.0 / cfg_.dp->size());
  torch::NoGradGuard ng;
  for_each_owned(b.params, lo, len, [&](const torch::Tensor& p, int64_t at, int64_t in_chunk, int64_t count) {
    p.mutable_grad().view({-1}).narrow(0, at, count).copy_(mine.narrow(0, in_chunk, count));
  });
}

void ZeroShards::gather_parameters() {
  torch::NoGradGuard ng;
  for (GradBucket& b : gathers_) in_flight_.push_back(start_gather(b));
  gathers_.clear();
  if (!cfg_.overlap_param_gather) finish_gathers(-1);
}

ZeroShards::Gather ZeroShards::start_gather(const GradBucket& b) {
  compat::Group& g = *b.group;
  std::vector<torch::Tensor> flat;
  for (const auto& p : b.params) flat.push_back(p.detach().reshape({-1}));
  torch::Tensor all = torch::cat(flat);
  const int64_t n = all.numel();
  const auto [lo, len] = cutter_.chunk_of(n);
  torch::Tensor mine = torch::zeros({len}, all.options());
  const int64_t have = std::max<int64_t>(0, std::min(n, lo + len) - lo);
  if (have > 0) mine.narrow(0, 0, have).copy_(all.narrow(0, lo, have));
  Gather x;
  x.out = torch::empty({len * g.size()}, all.options());
  try {
    x.work = compat::all_gather_async(g, mine, x.out);
  } catch (const std::exception& e) {
    comm_failure(cfg_.global_rank, "parameter all-gather in the " + g.name, -1, e);
  }
  x.params = b.params;
  x.group = &g;
  x.stage = b.stage;
  return x;
}

void ZeroShards::finish_gathers(int stage) {
  if (in_flight_.empty()) return;
  torch::NoGradGuard ng;
  std::vector<Gather> rest;
  for (Gather& x : in_flight_) {
    if (stage >= 0 && x.stage != stage) {
      rest.push_back(std::move(x));
      continue;
    }
    auto a = ExecClock::now();
    try {
      compat::wait(x.work, cfg_.timeout);
    } catch (const std::exception& e) {
      comm_failure(cfg_.global_rank, "parameter all-gather in the " + x.group->name, -1, e);
    }
    acc_.add_wait_s(seconds_between(a, ExecClock::now()));
    if (stage >= 0) ++acc_.rec().gathers_overlapped;
    int64_t off = 0;
    for (auto& p : x.params) {
      p.detach().view({-1}).copy_(x.out.narrow(0, off, p.numel()));
      off += p.numel();
    }
  }
  in_flight_ = std::move(rest);
}

void ZeroShards::step_units(std::vector<torch::Tensor> later) {
  for (const auto& [stage, P] : parts_)
    for (const auto& np : P->named_parameters()) later.push_back(np.second);
  opt_->step(later);
  fsdp_->update_units([this](const std::vector<torch::Tensor>& params) { opt_->update_late(params); });
  gathers_.clear();  // gathered unit by unit at their next passes instead
  for (const auto& [stage, P] : parts_)  // the unsharded gradients go until the next backward
    for (const auto& np : P->named_parameters()) np.second.mutable_grad() = torch::Tensor();
}

torch::Tensor ZeroShards::squared_gradients() const {
  torch::NoGradGuard ng;
  torch::Tensor acc = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(cfg_.device));
  for (const auto& o : shards_)
    acc += o.param.grad().reshape({-1}).narrow(0, o.offset, o.length).to(torch::kFloat64).pow(2).sum();
  compat::all_reduce_sum_blocking(cutter_.shard_group(), acc, cfg_.timeout);  // each chunk once (replicas hold the same)
  return acc;
}

}  // namespace stagecraft::runtime
