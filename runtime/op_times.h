// Where a compute action's time goes, by kind of operation (`train --op-times`, docs/runtime.md
// "Operation times"): the model's matrix products (its linear layers and experts, forward and
// both backward products) and its attention cores (forward and backward) mark their start and
// end on the executor's timeline, CUDA events on a GPU (device time, no host synchronisation) and
// the host clock on the CPU. The rest of a compute action's time is its memory-bound and other
// kernels. The cost model prices the same three kinds (costmodel/price.h LayerKinds), so a
// measured step and its prediction can be set side by side.
#pragma once

#include <array>
#include <tuple>
#include <vector>

#include "runtime/device.h"

namespace stagecraft::runtime {

enum class OpKind { Gemm = 0, AttentionCore = 1 };
inline constexpr int kOpKinds = 2;
const char* op_kind_name(OpKind k);  // "gemm", "attention_core"

class OpRecorder {
 public:
  explicit OpRecorder(Timeline& tl) : tl_(tl) {}
  void begin(OpKind k);  // a span of kind k starts now (nested spans of one kind count once)
  void end(OpKind k);
  // Seconds per kind of the spans recorded since clear(); valid after the timeline's resolve().
  std::array<double, kOpKinds> seconds() const;
  void clear();

 private:
  Timeline& tl_;
  std::vector<std::tuple<OpKind, int, int>> spans_;  // kind, start mark, end mark
  std::array<int, kOpKinds> depth_{};
  std::array<int, kOpKinds> start_{};
};

// The recorder of this process's running step (null: operations are not timed).
OpRecorder*& op_recorder();

// Times the enclosing scope as kind k when a recorder is installed.
class OpScope {
 public:
  explicit OpScope(OpKind k) : k_(k), r_(op_recorder()) {
    if (r_) r_->begin(k_);
  }
  ~OpScope() {
    if (r_) r_->end(k_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpKind k_;
  OpRecorder* r_;
};

// The backward of an operation timed from outside autograd: `output` wrapped so that a span of
// kind k begins when its gradient arrives (before the operation's backward), `input` so that the
// span ends when the input's gradient is complete (after it). Identity forwards; without a
// recorder or outside a graph the tensors are returned as they are.
torch::Tensor mark_backward_end(const torch::Tensor& input, OpKind k);
torch::Tensor mark_backward_begin(const torch::Tensor& output, OpKind k);

}  // namespace stagecraft::runtime
