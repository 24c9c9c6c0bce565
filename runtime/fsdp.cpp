#include "runtime/fsdp.h"

#include <string>

#include "runtime/device.h"
#include "runtime/memory_counter.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int fsdp_unit_of(const std::string& name) {
  if (name.size() > 1 && name[0] == 'L') {
    const auto dot = name.find('.');
    if (dot != std::string::npos) return std::stoi(name.substr(1, dot - 1));
  }
  if (name.rfind("embed.", 0) == 0) return kEmbedUnit;
  if (name.rfind("final.", 0) == 0 || name.rfind("head.", 0) == 0) return kHeadUnit;
  throw Error("runtime: zero 3: parameter '" + name + "' belongs to no unit (layer, embedding or head)");
}

ShardedParams*& fsdp_params() {
  static ShardedParams* p = nullptr;
  return p;
}

namespace {

c10::StorageImpl* storage_of(const torch::Tensor& p) { return p.storage().unsafeGetStorageImpl(); }

std::size_t bytes_of(const torch::Tensor& p) { return static_cast<std::size_t>(p.numel()) * p.element_size(); }

// The parameter's memory as a flat tensor of its own (its own version counter): writing a
// gathered unit through it does not look like an in-place change to the autograd graphs that
// saved the parameter for their backward, and must not, since the values are the same.
torch::Tensor flat_alias(const torch::Tensor& p) {
  return torch::from_blob(p.data_ptr(), {p.numel()}, torch::TensorOptions().dtype(p.dtype()).device(p.device()));
}

// Identity forward; its backward gathers the unit (`gather`: on the unit's output, before any of
// its backward) or releases it (on the unit's input: once that gradient is complete, after all
// of the unit's backward).
struct UnitBackwardHook : torch::autograd::Function<UnitBackwardHook> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t self, std::int64_t unit, bool gather) {
    ctx->saved_data["self"] = self;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["gather"] = gather;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto* s = reinterpret_cast<ShardedParams*>(static_cast<std::intptr_t>(ctx->saved_data["self"].toInt()));
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());
    if (ctx->saved_data["gather"].toBool()) s->gather(unit);
    else s->release(unit);
    return {g[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Writes (to_params) or reads back (from params) this member's chunk of a bucket.
void fsdp_copy_owned(std::vector<torch::Tensor>& params, std::int64_t lo, std::int64_t len, torch::Tensor& shard, bool to_params) {
  for_each_owned(params, lo, len, [&](const torch::Tensor& p, std::int64_t at, std::int64_t in_chunk, std::int64_t n) {
    torch::Tensor in_param = flat_alias(p).narrow(0, at, n), in_shard = shard.narrow(0, in_chunk, n);
    if (to_params) in_param.copy_(in_shard);
    else in_shard.copy_(in_param);
  });
}

}  // namespace

ShardedParams::ShardedParams(Options o) : opt_(o) {
  if (!opt_.group) throw Error("runtime: zero 3 needs the data-parallel group");
}

void ShardedParams::add_bucket(int unit, std::vector<torch::Tensor> params, std::int64_t lo, std::int64_t len) {
  Bucket b;
  b.unit = unit;
  for (const torch::Tensor& p : params)
    if (!p.is_contiguous() || p.storage_offset() != 0 || storage_of(p)->nbytes() != bytes_of(p))
      throw Error("runtime: zero 3 needs every parameter to own its storage (contiguous, whole)");
  b.params = std::move(params);
  b.lo = lo, b.len = len;
  of_unit_[unit].push_back(buckets_.size());
  gathered_[unit] = true;  // whole until shard()
  buckets_.push_back(std::move(b));
}

void ShardedParams::shard() {
  MemoryScope scope(MemCategory::Parameters);
  torch::NoGradGuard ng;
  for (Bucket& b : buckets_) {
    b.shard = torch::zeros({b.len}, b.params.front().options().requires_grad(false));  // zero padding past n
    fsdp_copy_owned(b.params, b.lo, b.len, b.shard, false);
  }
  for (auto& [unit, on] : gathered_) release(unit);
}

bool ShardedParams::gathered(int unit) const {
  auto it = gathered_.find(unit);
  return it != gathered_.end() && it->second;
}

void ShardedParams::allocate(int unit) {
  MemoryScope scope(MemCategory::Parameters);
  for (size_t i : of_unit_.at(unit))
    for (const torch::Tensor& p : buckets_[i].params) {
      c10::StorageImpl* s = storage_of(p);
      if (s->nbytes() == bytes_of(p)) continue;
      s->set_data_ptr_noswap(s->allocator()->allocate(bytes_of(p)));
      s->set_nbytes(bytes_of(p));
    }
}

void ShardedParams::gather(int unit) {
  auto it = gathered_.find(unit);
  if (it == gathered_.end()) return;  // a unit this rank does not hold (none of its parameters)
  if (it->second) return;
  allocate(unit);
  MemoryScope scope(MemCategory::Communication);
  torch::NoGradGuard ng;
  compat::Group& g = *opt_.group;
  for (size_t i : of_unit_.at(unit)) {
    Bucket& b = buckets_[i];
    torch::Tensor out = torch::empty({b.len * g.size()}, b.shard.options());
    compat::all_gather(g, b.shard, out, opt_.timeout);
    std::int64_t off = 0;
    for (const torch::Tensor& p : b.params) {
      flat_alias(p).copy_(out.narrow(0, off, p.numel()));
      off += p.numel();
    }
  }
  it->second = true;
  ++gathers_;
}

void ShardedParams::release(int unit) {
  auto it = gathered_.find(unit);
  if (it == gathered_.end() || !it->second) return;
  for (size_t i : of_unit_.at(unit)) {
    drop_weight_copies(buckets_[i].params);  // their bf16 copies go with them (FSDP2's param_dtype)
    for (const torch::Tensor& p : buckets_[i].params) {
      c10::StorageImpl* s = storage_of(p);
      s->set_data_ptr_noswap(at::DataPtr(nullptr, p.device()));
      s->set_nbytes(0);
    }
  }
  it->second = false;
}

void ShardedParams::update_units(const std::function<void(const std::vector<torch::Tensor>& params)>& update) {
  torch::NoGradGuard ng;
  for (auto& [unit, on] : gathered_) {
    if (!on) {
      allocate(unit);
      for (size_t i : of_unit_.at(unit)) fsdp_copy_owned(buckets_[i].params, buckets_[i].lo, buckets_[i].len, buckets_[i].shard, true);
      on = true;
    }
    std::vector<torch::Tensor> params;
    for (size_t i : of_unit_.at(unit)) params.insert(params.end(), buckets_[i].params.begin(), buckets_[i].params.end());
    update(params);
    for (size_t i : of_unit_.at(unit)) fsdp_copy_owned(buckets_[i].params, buckets_[i].lo, buckets_[i].len, buckets_[i].shard, false);
    release(unit);
  }
}

torch::Tensor ShardedParams::wrap_input(int unit, const torch::Tensor& x) {
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return x;
  return UnitBackwardHook::apply(x, static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(this)), unit, false);
}

torch::Tensor ShardedParams::after_forward(int unit, const torch::Tensor& y, bool weights_in_backward) {
  const bool graph = y.requires_grad() && torch::GradMode::is_enabled();
  if (opt_.reshard_after_forward || !weights_in_backward || !graph) release(unit);
  if (!graph || !weights_in_backward) return y;
  return UnitBackwardHook::apply(y, static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(this)), unit, true);
}

std::int64_t ShardedParams::shard_bytes() const {
  std::int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += static_cast<std::int64_t>(b.shard.nbytes());
  return bytes;
}

std::vector<std::pair<std::string, torch::Tensor>> ShardedParams::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < buckets_.size(); ++i) out.emplace_back("fsdp_shard." + std::to_string(i), buckets_[i].shard);
  return out;
}

void ShardedParams::load(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard ng;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    auto it = by_name.find("fsdp_shard." + std::to_string(i));
    if (it == by_name.end() || it->second.sizes() != buckets_[i].shard.sizes())
      throw Error("runtime: checkpoint has no shard " + std::to_string(i) + " of this run's size (another plan?)");
    buckets_[i].shard.copy_(it->second);
  }
  for (auto& [unit, on] : gathered_) release(unit);  // gathered anew from the loaded chunks
}

}  // namespace stagecraft::runtime
