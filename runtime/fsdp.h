// Fully sharded data parallelism in the runtime (`--zero 3`, docs/runtime.md "Fully sharded
// data parallelism"), with FSDP's semantics (Zhao et al., PyTorch FSDP, VLDB 2023, sec. 3;
// FSDP2's fully_shard): the parameters are sharded over the data-parallel group, and each unit
// (a transformer layer, the embedding, the head: the units torchtitan wraps) is all-gathered
// before its forward, released after it (reshard_after_forward) and gathered again when its
// backward starts, then released when its backward is done. Only this member's chunk of each
// unit stays resident between uses; the optimizer updates only that chunk (AdamW's shards).
//
// Layout: the executor cuts each stage's parameters into buckets at unit boundaries (one unit a
// bucket or more) and pads each bucket to a multiple of dp, cut into dp chunks (the cut of
// ZeRO 1 and 2 here, Megatron's distributed optimizer). A bucket's chunk is what this member
// keeps (`shard`); a gather all-gathers every member's chunk back into the parameters' storage.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/compat.h"

namespace stagecraft::runtime {

// The unit a parameter belongs to, from its GptPart name: "L<l>." layer l, "embed." the
// embedding, "final." and "head." the head.
constexpr int kEmbedUnit = -1;
constexpr int kHeadUnit = 1 << 20;
int fsdp_unit_of(const std::string& param_name);

// The elements [lo, lo + len) of the concatenation of `params` (one member's chunk of a bucket:
// ZeRO's and FSDP's cut), parameter by parameter: fn(p, offset in p's flat view, offset in the
// chunk, count) for each parameter the chunk overlaps.
template <class Fn>
void for_each_owned(const std::vector<torch::Tensor>& params, std::int64_t lo, std::int64_t len, Fn&& fn) {
  std::int64_t off = 0;
  for (const torch::Tensor& p : params) {
    const std::int64_t a0 = std::max(off, lo), a1 = std::min(off + p.numel(), lo + len);
    if (a1 > a0) fn(p, a0 - off, a0 - lo, a1 - a0);
    off += p.numel();
  }
}

class ShardedParams {
 public:
  struct Options {
    compat::Group* group = nullptr;            // the data-parallel group the parameters are sharded over
    std::chrono::milliseconds timeout{60000};  // each all-gather's wait limit
    bool reshard_after_forward = true;         // release a unit after its forward (else keep it to its backward)
  };
  explicit ShardedParams(Options o);

  // A bucket of `params` (all of `unit`, contiguous in a stage's parameter order) whose
  // concatenation this member holds elements [lo, lo + len) of (len = the padded chunk).
  void add_bucket(int unit, std::vector<torch::Tensor> params, std::int64_t lo, std::int64_t len);
  // Keeps each bucket's chunk of the current (whole) parameters, then releases every unit.
  void shard();

  void gather(int unit);   // storage for the unit's parameters and every member's chunks in it; blocking
  void release(int unit);  // frees the unit's parameters' storage (shapes kept)
  bool gathered(int unit) const;

  // For the optimizer, unit by unit: storage for the unit's parameters with this member's
  // chunk written in (the rest is never read: AdamW updates owned elements only), `update` on
  // them, the updated chunk kept back and the unit released; so at most one unit is resident
  // beside the chunks, as when FSDP's optimizer steps on its sharded parameters.
  void update_units(const std::function<void(const std::vector<torch::Tensor>& params)>& update);

  // The model's hooks around one unit's forward (GptPart): gather; the input wrapped so that
  // its backward releases the unit once the unit's backward is done; the output wrapped so
  // that its backward gathers the unit first (when the backward reads the weights).
  void before_forward(int unit) { gather(unit); }
  torch::Tensor wrap_input(int unit, const torch::Tensor& x);
  torch::Tensor after_forward(int unit, const torch::Tensor& y, bool weights_in_backward);

  long gathers() const { return gathers_; }          // all-gathers of units so far
  std::int64_t shard_bytes() const;                  // bytes of the chunks this member keeps
  // This member's chunks by name ("fsdp_shard.<bucket>"), for sharded checkpoints.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load(const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  struct Bucket {
    int unit = 0;
    std::vector<torch::Tensor> params;
    std::int64_t lo = 0, len = 0;         // this member's chunk [lo, lo + len) of the params' elements
    torch::Tensor shard;                  // (len) this member's chunk, zero-padded past n
  };
  void allocate(int unit);
  Options opt_;
  std::vector<Bucket> buckets_;
  std::map<int, std::vector<size_t>> of_unit_;  // unit -> its buckets
  std::map<int, bool> gathered_;
  long gathers_ = 0;
};

// The process's sharded parameters (null: parameters whole), as tp_context() is for tp.
ShardedParams*& fsdp_params();

}  // namespace stagecraft::runtime
