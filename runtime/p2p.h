// The executor's point-to-point transfers (runtime/executor.h; docs/ir.md): SEND and RECV
// actions post asynchronous transfers, a run of consecutive ones issued as one group
// (compat::begin_p2p / end_p2p: NCCL-safe, docs/runtime.md); a compute action waits for the
// receives of its (stage, microbatch) posted before it; OPTIMIZER waits for every send. Holds
// the received tensors and the input gradients waiting for their SEND_B. Internal to the runtime.
#pragma once

#include <map>
#include <vector>

#include "runtime/exec_accounting.h"
#include "runtime/exec_common.h"

namespace stagecraft::runtime {

class P2p {
 public:
  P2p(const ExecConfig& cfg, const std::map<int, ModelPart*>& parts, ExecAccounting& acc)
      : cfg_(cfg), parts_(parts), acc_(acc) {}

  // SEND_F (`output`: the stage's output, with its graph) or SEND_B (the input gradient the
  // backward left, keep_input_grad); returns the send's handle.
  compat::WorkPtr post_send(const schedules::Action& a, const torch::Tensor& output);
  void post_recv(const schedules::Action& a, size_t span);  // `span`: the RECV's, closed when waited
  bool in_group() const { return in_group_; }
  void begin_group();
  void end_group();  // a handle the backend left null inside the group becomes the group's

  // Waits for the receives of (stage, mb) posted so far: the activation for a forward
  // (grad = false), the output gradient for a backward or recompute (grad = true), as the
  // evaluator does (docs/evaluator.md).
  void wait_inputs(int stage, int mb, bool grad);
  // The received input of (stage, mb), now the stage's kept activation; undefined when none was received.
  torch::Tensor take_received_input(int stage, int mb);
  // The gradient of the stage's output: received, or left by the next stage on this rank.
  torch::Tensor take_output_grad(int stage, int mb);
  void keep_input_grad(int stage, int mb, torch::Tensor g) { grad_in_[{stage, mb}] = std::move(g); }
  void wait_sends();                // every send posted so far (OPTIMIZER)
  bool holds_receives() const;      // a received tensor or posted receive not yet consumed

 private:
  struct Pending {  // a posted receive
    compat::WorkPtr work;
    size_t span = 0;  // index of its span, closed when a consumer waits
    schedules::Op op = schedules::Op::RECV_F;
    int peer_global = 0;
  };
  torch::Tensor activation(int stage, bool forward);
  int global_of_stage(int stage) const { return cfg_.global_of(cfg_.schedule->rank_of(stage)); }
  int tag(bool forward, int consumer, int mb) const;
  void note_in_group(const compat::WorkPtr& w, ExecKey key, long index);

  const ExecConfig& cfg_;
  const std::map<int, ModelPart*>& parts_;
  ExecAccounting& acc_;
  std::map<ExecKey, torch::Tensor> recv_f_;   // (b, s, h) received activations
  std::map<ExecKey, torch::Tensor> recv_b_;   // (b, s, h) received output gradients
  std::map<ExecKey, torch::Tensor> grad_in_;  // (b, s, h) input gradients waiting for SEND_B
  std::map<ExecKey, std::vector<Pending>> pending_;
  std::vector<std::pair<compat::WorkPtr, int>> sends_;  // (work, peer global rank)
  // The open group of sends and receives (begin_group .. end_group): what they returned, and
  // where each handle lives (a send's index in sends_, or a receive's key and index in pending_).
  bool in_group_ = false;
  std::vector<compat::WorkPtr> group_issued_;
  std::vector<std::pair<ExecKey, long>> group_slots_;  // key {-1,-1}: sends_[index]
};

}  // namespace stagecraft::runtime
