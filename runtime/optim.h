// AdamW (Loshchilov and Hutter, ICLR 2019; the update torch.optim.AdamW performs), written
// out so that its state is plain tensors: checkpoints save and restore it exactly.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/torch_pch.h"

namespace stagecraft::runtime {

// How one update runs over the parameters (`--adamw`); the arithmetic is the same.
enum class AdamWKernel {
  Loop,     // the update's eight elementwise operations, one parameter at a time
  Foreach,  // the same operations, each over every parameter at once (ATen's _foreach_* ops:
            // multi-tensor kernels on a GPU, torch.optim.AdamW(foreach=True)); the CPU loops
  Fused,    // one kernel for the whole update of every parameter (at::_fused_adamw_,
            // torch.optim.AdamW(fused=True)): LibTorch 2.1+ on a GPU, 2.4+ on the CPU
};
AdamWKernel parse_adamw_kernel(const std::string& s);  // loop | foreach | fused; InputError otherwise
// Whether this build runs the fused kernel on `device` (see AdamWKernel::Fused).
bool fused_adamw_available(const torch::Device& device);

struct AdamWOptions {
  double lr = 1e-3;            // learning rate
  double beta1 = 0.9;          // first-moment decay
  double beta2 = 0.999;        // second-moment decay
  double eps = 1e-8;           // denominator guard
  double weight_decay = 0.01;  // decoupled decay, multiplied by lr
  AdamWKernel kernel = AdamWKernel::Foreach;  // how the update is launched
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions opt);
  // One update from the parameters' .grad, then the gradients are zeroed (kept allocated, as
  // Megatron-LM's gradient buffer). Parameters in
  // `later` are left alone, gradients included: update_late() applies their share of this
  // step afterwards (FOLD3D's deferred reduction).
  void step(const std::vector<torch::Tensor>& later = {});
  // Applies the last step() to `params`, which it skipped, from their .grad now.
  void update_late(const std::vector<torch::Tensor>& params);
  long steps_done() const { return step_; }
  // Bytes of the optimizer's own state: the two moments of every (owned) element.
  std::int64_t state_bytes() const;
  // ZeRO (Rajbhandari et al. SC20; Megatron's distributed optimizer): this data-parallel member
  // updates only elements [offset, offset + length) of each listed parameter's flattened view
  // (unlisted: none) and keeps moments for those alone. Call before the first step and before
  // load(); the caller all-gathers the parameters after each step.
  struct Owned {
    torch::Tensor param;
    int64_t offset = 0, length = 0;
  };
  void shard(const std::vector<Owned>& owned);
  bool sharded() const { return sharded_; }
  // ZeRO 3: the parameters' values live sharded elsewhere (runtime/fsdp.h), so state() leaves
  // them out and load() does not write them.
  void keep_params_elsewhere() { params_elsewhere_ = true; }
  // Parameters, moments and the step count, by name, for checkpoints (sharded: this member's
  // moments only, which another dp size cannot load).
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Restores what state() returned; throws Error when a name or a shape is missing.
  void load(const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  // Parameters `idx` at step_ (each one's owned elements when sharded), then their gradients
  // zeroed.
  void update(const std::vector<size_t>& idx);
  size_t index_of(const torch::Tensor& p) const;

  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::map<const void*, size_t> index_;  // parameter storage -> position in params_
  std::vector<torch::Tensor> m_, v_;  // first and second moments, each shaped like its parameter
                                      // (sharded: (length) of the owned elements)
  std::vector<std::pair<int64_t, int64_t>> own_;  // sharded: (offset, length) per parameter
  bool sharded_ = false;
  bool params_elsewhere_ = false;
  AdamWOptions opt_;
  long step_ = 0;
};

}  // namespace stagecraft::runtime
