// The executor's accounting of one iteration (runtime/executor.h): each action's span on the
// timeline (stream, start, end, re-closed when a consumer waits for it), the host time waited
// and the tp communication inside each action, the bytes live after it, the memory categories
// actions allocate under, the loss and gradient sums, and the StepRecord assembled from them
// once the timeline is resolved. Internal to the runtime.
#pragma once

#include <memory>
#include <vector>

#include "runtime/executor.h"
#include "runtime/op_times.h"

namespace stagecraft::runtime {

class ExecAccounting {
 public:
  ExecAccounting(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts) : cfg_(cfg), parts_(parts) {}

  // A new iteration of `n` actions timed from `t0`: the record, the marks and the device peak reset.
  void begin_step(std::chrono::steady_clock::time_point t0, size_t n);
  void begin_action(size_t i);  // before action i is issued: its start mark
  void end_action(size_t i);    // after it: its own end, host wait, tp communication and live bytes
  // After the last action: resolves the timeline into the record's times, spans and pieces
  // (`ops`: the op-time recorder of the step, null without --op-times).
  void finish_step(const std::vector<schedules::Action>& list, const OpRecorder* ops);

  // Closes span `i` again now (a receive or reduction ends when its consumer's wait returns).
  void close_span(size_t i);
  void add_wait_s(double s) { wait_in_action_ += s; }  // host time blocked inside the current action
  void add_loss(const torch::Tensor& loss);             // a last stage's microbatch loss
  void set_grad_sq(torch::Tensor sum) { grad_sq_acc_ = std::move(sum); }
  StepRecord& rec() { return rec_; }  // the counters the parts keep (p2p groups, buckets, gathers)
  Timeline* timeline() { return timeline_.get(); }
  std::vector<PieceMarks>& piece_marks() { return piece_marks_; }

  // What an action's allocations are, until retagged (memory_counter.h).
  static MemCategory category_of(schedules::Op op);
  // Gradients a backward produced leave its working memory for their own category.
  void tag_gradients() const;

 private:
  void resolve_times(const OpRecorder* ops);
  void add_spans(const std::vector<schedules::Action>& list);

  const ExecConfig& cfg_;
  const std::map<int, ModelPart*>& parts_;
  StepRecord rec_;
  double wait_in_action_ = 0;                // host waits of the action being executed
  double tp_before_ = 0;                     // tp_context().comm_s when it started
  long collectives_before_ = 0;              // tp_context().collectives when the step started
  int step_mark_ = -1;                       // the step's start on the timeline
  std::unique_ptr<Timeline> timeline_;       // marks of this iteration (device events on a GPU)
  std::vector<int> start_mark_;              // per span: its start
  std::vector<std::vector<int>> end_marks_;  // per span: the latest of these is its end (the first: its own)
  std::vector<double> host_wait_, tp_comm_;  // per action, host-measured seconds
  std::vector<std::int64_t> live_;           // per action, bytes in tensors after it
  torch::Tensor loss_acc_;                   // () sum of this iteration's microbatch losses, on the device
  torch::Tensor grad_sq_acc_;                // () squared gradients summed at OPTIMIZER, fp64 on the device
  std::vector<PieceMarks> piece_marks_;      // pieces of overlapped tp stages in this iteration
};

}  // namespace stagecraft::runtime
