// Tensor-parallel communication overlap inside one stage action (plan.tp_overlap merak,
// cross-pass, oases; docs/runtime.md "Tensor-parallel overlap"). The runtime executes the inner
// schedule that schedules/tp_overlap.h generates and costmodel/inner.h evaluates, piece by piece
// in its issue order: the microbatch is split into two sub-batches along the batch dimension,
// each tp collective is an asynchronous c10d all-reduce, waited for only when a later piece
// reads its result, so one sub-batch's collective is in flight while the other computes
// (Merak Sec. 5.3; Oases Sec. IV, Algorithm 1).
//
// The autograd graph of a stage is cut at each block's input x[k] (a leaf of the residual
// stream) and at Megatron's f (the layer-norm output q[k] re-entered as the leaf qd[k] before
// the column-parallel product). Forward of block k: q = norm(x[k]), partial = core(qd), launch
// the all-reduce of partial; its consumer sets x[k+1] = x[k] + (sum + bias). Backward of block
// k: the gradient of x[k+1] (finished by the layer-norm backward of block k+1 with its
// all-reduced qd gradient), autograd through block k to x[k].grad and qd[k].grad, then the
// asynchronous all-reduce of qd[k].grad.
#pragma once

#include <array>
#include <chrono>
#include <vector>

#include "runtime/device.h"
#include "runtime/model.h"
#include "schedules/tp_overlap.h"

namespace stagecraft::runtime {

// One executed piece of an overlapped action, for the trace.
struct PieceSpan {
  int position = 0;         // index of the stage action in the rank's list
  bool comm = false;        // a tp collective (from its launch to the return of its wait); else compute
  schedules::Pass pass = schedules::Pass::Forward;  // forward, recomputation or backward
  int block = 0;            // tp block; -1 the embedding, 2 * layers the head and loss
  int sub_batch = 0;        // 0 or 1
  double start_s = 0;       // seconds since the run started
  double end_s = 0;
};

// A piece's marks on the executor's timeline; resolved into the span's seconds after the iteration.
struct PieceMarks {
  PieceSpan span;           // start_s and end_s filled at resolution
  int start_mark = -1;      // Timeline mark at its start (a collective: its launch)
  int end_mark = -1;        // at its end (a collective: the return of its wait)
};

// One sub-batch of one (stage, microbatch), from its forward to its backward. Block k of the
// stage's 2L blocks reads x[k] and writes x[k+1]. Entries are released once nothing needs them.
struct SubBatch {
  std::vector<torch::Tensor> x;        // 2L+1 entries: (b/2, s, h) residual stream at block k's input
                                       // (a leaf where a graph starts; x[2L] the stage output)
  std::vector<torch::Tensor> q;        // 2L: (b/2, s, h) layer-norm output, graph back to x[k]
  std::vector<torch::Tensor> qd;       // 2L: (b/2, s, h) leaf holding q's value; the core starts here
  std::vector<torch::Tensor> partial;  // 2L: (b/2, s, h) row-parallel partial sum, until its all-reduce is consumed
  std::vector<torch::Tensor> y;        // 2L: (b/2, s, h) block output x[k] + (sum + bias), graph back to x[k], qd[k]
  std::vector<torch::Tensor> saved;    // 2L: (b/2, s, h) block input kept by F for recomputation (k >= 1;
                                       // merak, cross-pass: layer inputs, oases: every block's; x[0] is the checkpoint)
  torch::Tensor tokens, targets;       // (b/2, s) this sub-batch's samples (during F)
  torch::Tensor embed_out;             // (b/2, s, h) embedding output with its graph (first stage)
  torch::Tensor loss;                  // () this sub-batch's mean loss with its graph (last stage)
  torch::Tensor out_grad;              // (b/2, s, h) gradient of x[2L] from the next stage (during B)
  double weight = 0.5;                 // its share of the microbatch's samples: the loss weight
};

// State of one (stage, microbatch) run with overlap.
struct TpMicrobatch {
  std::array<SubBatch, 2> sb;          // the two sub-batches
  int recompute_layers = 0;            // the first layers F ran without a graph (R's fraction)
};

// What the pieces of one action need from the executor.
struct PieceEnv {
  GptPart* part = nullptr;                                  // the stage's model part
  schedules::TpOverlap mode = schedules::TpOverlap::Merak;  // never blocking here
  compat::Group* tp = nullptr;                              // the tp group the collectives run in
  std::chrono::milliseconds timeout{60000};                 // limit of every wait
  Precision precision = Precision::Fp32;                    // bf16: forward and recomputation under autocast
  torch::Device device = torch::kCPU;                       // where the stage computes
  Timeline* timeline = nullptr;                             // marks of the piece spans
  std::vector<PieceMarks>* marks = nullptr;                 // where the piece spans go
  int position = 0;                                         // index of the action in the list
  int global_rank = 0;                                      // for messages
};

struct StageForward {
  torch::Tensor output;  // (b, s, h) stage output, or () the microbatch's loss on the last stage; no graph
  torch::Tensor ckpt;    // (b, s, h) the stage's checkpoint: its input, or the embedding output
};

// F of a stage: from `input` (b, s, h) (not the first stage) or `tokens` (b, s) (first);
// `targets` (b, s) feed the loss on the last stage. `mb.recompute_layers` must be set.
StageForward overlap_forward(const PieceEnv& env, TpMicrobatch& mb, const torch::Tensor& input,
                             const torch::Tensor& tokens, const torch::Tensor& targets);
// B or I (`op`) of a stage: `out_grad` (b, s, h) from the next stage (undefined on the last,
// whose loss is back-propagated times `loss_scale`); `ckpt` (b, s, h) for the joint
// recomputation (every overlap mode recomputes inside the backward). Returns the input gradient (b, s, h), undefined on the
// first stage. Under DeferWeightGrads the linear layers' weight gradients of both sub-batches queue.
torch::Tensor overlap_backward(const PieceEnv& env, TpMicrobatch& mb, schedules::Op op, const torch::Tensor& out_grad,
                               double loss_scale, const torch::Tensor& ckpt);

}  // namespace stagecraft::runtime
