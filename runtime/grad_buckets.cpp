#include "runtime/grad_buckets.h"

#include <algorithm>

#include "runtime/fsdp.h"

namespace stagecraft::runtime {

GradShare BucketCutter::cut(const schedules::Action& a, ShareCursor& cursor) const {
  const auto& named = part_of(parts_, a.stage, cfg_.global_rank).named_parameters();
  size_t& cur = cursor.next[a.stage];
  double& share = cursor.share[a.stage];
  share = std::min(1.0, share + a.fraction);
  double total = 0;
  for (const auto& np : named) total += static_cast<double>(np.second.numel());
  double done = 0;
  for (size_t i = 0; i < cur; ++i) done += static_cast<double>(named[i].second.numel());
  GradShare out(1);
  double bytes = 0;
  int unit = 0;  // zero 3: a bucket holds one unit's parameters (runtime/fsdp.h)
  while (cur < named.size() && (share >= 1.0 || done < share * total - 0.5)) {
    const bool new_unit = cfg_.zero == 3 && !out.back().empty() && fsdp_unit_of(named[cur].first) != unit;
    if (cfg_.zero == 3) unit = fsdp_unit_of(named[cur].first);
    torch::Tensor p = named[cur++].second;
    done += static_cast<double>(p.numel());
    if (new_unit || (!out.back().empty() && is_expert(out.back().front()) != is_expert(p))) {  // one group a bucket
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(p);
    bytes += static_cast<double>(p.numel()) * 4;
    if (bytes >= cfg_.bucket_bytes) {
      out.emplace_back();
      bytes = 0;
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

compat::Group& BucketCutter::group_of(int stage, const std::vector<torch::Tensor>& params) const {
  if (cfg_.expert_dp && !params.empty() && is_expert(params.front())) return *cfg_.expert_dp;
  auto it = cfg_.grad_groups.find(stage);
  return it == cfg_.grad_groups.end() ? shard_group() : *it->second;
}

std::pair<int64_t, int64_t> BucketCutter::chunk_of(int64_t n) const {
  const int64_t d = shard_group().size(), c = (n + d - 1) / d;
  return {shard_group().rank * c, c};
}

}  // namespace stagecraft::runtime
