// The executor: runs one rank's lowered action list, one iteration per call, with the IR's
// semantics (docs/ir.md): SEND/RECV post asynchronous transfers; a compute action on
// (stage, microbatch) first waits for every receive and reload of that pair posted before
// it; REDUCE_GRAD starts bucketed asynchronous all-reduces that OPTIMIZER waits for; I
// queues the weight gradients that W computes; R recomputes a stage's first `fraction` of
// layers from its checkpoint. Every action's start and end are recorded.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "runtime/device.h"
#include "runtime/memory_counter.h"
#include "runtime/model.h"
#include "runtime/optim.h"
#include "runtime/tp_pieces.h"
#include "schedules/schedule.h"

namespace stagecraft::runtime {

struct ActionSpan {
  int position = 0;     // index in the rank's action list
  int stream = 0;       // trace track: 0 compute, 1 p2p, 2 collective, 3 copy
  double start_s = 0;   // seconds since the run started (host clock; device events on a GPU)
  double end_s = 0;
  std::int64_t live_bytes = -1;  // bytes in tensors on the device just after the action was issued
                                 // (device_allocated_bytes; -1 where nothing counts them)
};

struct StepRecord {
  double loss_sum = 0;       // sum of the last stage's microbatch losses (0 when no last stage)
  int loss_count = 0;        // microbatches that contributed
  double time_s = 0;         // wall time of the iteration on this rank
  double compute_s = 0;      // compute actions, minus host waits and tp communication inside them
                             // (on a GPU the waits are stream-ordered: they stay in compute_s)
  double comm_s = 0;         // tp all-reduces plus posting transfers and reductions
  double wait_s = 0;         // host blocked on receives, sends and reductions
  std::vector<ActionSpan> spans;  // one per action, in list order
  std::vector<PieceSpan> pieces;  // overlapped tp stages: one per compute piece and per tp collective
  long tp_collectives = 0;        // tp collectives this rank issued (blocking and asynchronous)
  long p2p_groups = 0;            // groups of consecutive sends and receives issued together
                                  // (compat::begin_p2p / end_p2p): one per run of them in the list
  long buckets_in_backward = 0;   // gradient buckets whose all-reduce started inside the backward
  long gathers_overlapped = 0;    // the last step's parameter all-gathers (overlap_param_gather)
                                  // this step finished inside a compute action, not at the step
                                  // (overlap_grad_reduce)
  long preempt_chunks = 0;        // preemptive_comm: reduction chunks all-reduced in the step
  long preempt_yields = 0;        // of those, chunks that waited for a pipeline send first
  long preempt_expired = 0;       // sends that stopped holding the chunks at max_hold (runtime/preempt.h)
  double preempt_yield_s = 0;     // time they waited
  std::int64_t peak_bytes = -1;   // peak bytes in tensors on the device during the step
                                  // (device_peak_bytes after a reset at its start; -1: not counted)
  MemBreakdown peak_breakdown{};  // bytes per category at that peak (CPU counting allocator,
                                  // memory_counter.h; all zero where nothing tags allocations)
  std::array<double, 2> op_s{};   // ExecConfig::op_times: seconds of matrix products and of attention
                                  // cores inside the compute actions (runtime/op_times.h)
  double optimizer_s = 0;         // the OPTIMIZER actions' compute (part of compute_s)
  double grad_sq = 0;             // sum of squared gradients of this rank's parameters at OPTIMIZER
                                  // (a diagnostic for comparing runs of one plan)
};

// Input and target of one microbatch of this data-parallel rank: (b, s) tokens and (b, s) next
// tokens for a GPT; a TorchScript model's forward arguments (runtime/script_part.h).
using BatchFn = std::function<std::pair<torch::Tensor, torch::Tensor>(int microbatch)>;

struct ExecConfig {
  const schedules::Schedule* schedule = nullptr;  // lowered, checked by check_executable
  int pp_rank = 0;                        // this rank's pipeline rank (index into actions)
  std::function<int(int pp_rank)> global_of;  // global rank at another pipeline rank, same tp and dp
  compat::Group* world = nullptr;         // point-to-point transfers (global ranks)
  compat::Group* dp = nullptr;            // gradient all-reduces (the divisor is its size)
  // Stages whose gradients are reduced in another group than dp: with several chains
  // (Chimera) every copy of a model part, across chains and dp, sums in one group.
  std::map<int, compat::Group*> grad_groups;  // stage -> group
  // Expert parallelism (ep > 1): the routed experts' parameters (their TensorImpls) are reduced
  // over the expert-data-parallel group instead (dp/ep members, ep apart; still divided by dp:
  // an expert's gradient already sums the tokens of its whole ep group). Buckets never mix the
  // two kinds.
  compat::Group* expert_dp = nullptr;
  std::set<const void*> expert_params;
  int ep = 1;                             // plan.ep (the support rules name it; expert_dp is its group)
  std::chrono::milliseconds timeout{60000};  // limit of every wait
  std::int64_t microbatch_size = 1;       // b
  double bucket_bytes = 4e6;              // gradient bucket size for REDUCE_GRAD
  bool overlap_grad_reduce = false;       // launch each bucket's all-reduce from gradient hooks during
                                          // the stage's last backward (plan.overlap_grad_reduce)
  bool preemptive_comm = false;           // gradient all-reduces in chunks that wait for this rank's
                                          // sends in flight (plan.preemptive_comm; runtime/preempt.h)
  int zero = 0;                           // distributed optimizer (plan.zero): each bucket's gradients
                                          // reduce-scattered over dp, AdamW updating this member's chunk,
                                          // the parameters all-gathered after the step; 3: the
                                          // parameters themselves sharded too (runtime/fsdp.h), each
                                          // unit gathered for its passes
  bool reshard_after_forward = true;      // zero 3: release a unit after its forward (plan.reshard_after_forward)
  // zero 3 with hybrid sharding (HSDP, plan.shard_group < dp): the parameters sharded over the
  // shard group (shard_group consecutive dp ranks), each chunk replicated over the replicate
  // group (the dp / shard_group ranks holding the same chunk); null: sharded over all of dp.
  compat::Group* shard = nullptr;
  compat::Group* replicate = nullptr;
  bool overlap_param_gather = false;      // with zero: those all-gathers left in flight after the step,
                                          // each stage's waited for at its first compute of the next
                                          // step (plan.overlap_param_gather; Megatron-Core
                                          // --overlap-param-gather)
  torch::Device device = torch::kCPU;     // where the parts, activations and received buffers live
  Precision precision = Precision::Fp32;  // bf16: forwards and recomputes under autocast
  // How each stage's tp collectives overlap its compute (plan.overlap_of its model part; with
  // tp > 1 only). Absent or blocking: Megatron's blocking all-reduces inside autograd.
  std::map<int, schedules::TpOverlap> tp_overlap;  // stage -> mode
  int global_rank = 0;                    // for messages
  bool op_times = false;                  // time matrix products and attention cores (train --op-times)
};

class Executor {
 public:
  // `parts` maps each stage this rank holds to its model part.
  Executor(ExecConfig cfg, std::map<int, ModelPart*> parts, AdamW* optimizer);
  ~Executor();
  // Runs the action list once. `t0` is the run's time origin for the spans.
  StepRecord run_step(const BatchFn& batch, std::chrono::steady_clock::time_point t0);
  // Applies the gradient shares whose reduction the list defers to the next iteration
  // (FOLD3D), as that iteration would before its forwards, and finishes the parameter
  // all-gathers left in flight (overlap_param_gather): call after the last step, before a
  // checkpoint, so that every parameter has seen every step.
  void flush();
  // zero 3: this member's parameter chunks by name, for a sharded checkpoint (empty otherwise),
  // and their restoration; the bytes of parameters it keeps resident (-1: the parameters whole).
  std::vector<std::pair<std::string, torch::Tensor>> sharded_state() const;
  void load_sharded_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);
  std::int64_t sharded_param_bytes() const;
  long unit_gathers() const;  // zero 3: units all-gathered so far (0 otherwise)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagecraft::runtime
