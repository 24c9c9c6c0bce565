// Passes over schedules. Generators emit compute-only action lists; these passes add what
// execution needs: sends and receives at stage boundaries that cross ranks, a data-parallel
// gradient reduction after each stage's last backward, the optimizer step, and recomputation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

// Where lowering places each stage's data-parallel gradient reduction (REDUCE_GRAD).
enum class GradReduceAt {
  Auto,      // as the schedule's params say: "eager_grad_reduce": true -> StageEnd, else RankEnd
  RankEnd,   // every stage's after the rank's last backward: Megatron-LM without
             // --overlap-grad-reduce (finalize_model_grads runs once the whole backward is done)
  StageEnd,  // each stage's right after its own last backward, overlapping the rank's later
             // backwards: eager synchronization (Chimera's runtime, looped BFS, PyTorch pipelining)
};
std::string_view grad_reduce_at_name(GradReduceAt a);             // auto | rank-end | stage-end
GradReduceAt parse_grad_reduce_at(std::string_view s, const std::string& field);  // throws InputError

struct LowerOptions {
  bool insert_reduce_grad = true;  // REDUCE_GRAD after each stage's last backward, unless the
                                   // generator placed reductions for that stage itself
  GradReduceAt reduce_at = GradReduceAt::StageEnd;  // where those REDUCE_GRADs go
  bool insert_optimizer = true;    // OPTIMIZER at the end of each rank's list, unless present
  int recv_lookahead = -1;         // post each receive this many compute actions before the
                                   // action that consumes it (0: right before it; prefetch when
                                   // > 0); -1: as the schedule's params ask ("recv_lookahead"), else 0
};

// Adds SEND_F/RECV_F/SEND_B/RECV_B where adjacent stages sit on different ranks: a send right
// after the producing compute, a receive before the consuming one. The consumer of a gradient
// is its backward, or, when the schedule's params say "recompute_timing": "late" (the
// default), the R right before that backward: recomputation waits for the gradient as in
// Megatron-LM; with "early" the receive goes between R and the backward (Merak Sec. 5.1).
// A schedule that already has sends and receives keeps them (only reductions and the
// optimizer are added).
Schedule lower(const Schedule& s, const LowerOptions& opt = {});

// Adds R(stage, mb) with the given fraction of the stage's layers right before each backward
// (B or I) of every stage whose fraction is > 0 and which has no R yet: recomputation as
// Megatron-LM runs it, after the gradient has been received. fraction_per_stage has
// num_stages entries in [0, 1].
Schedule insert_recompute(const Schedule& s, const std::vector<double>& fraction_per_stage);

// The compute-only part of a schedule (drops SEND/RECV, REDUCE_GRAD, OPTIMIZER).
Schedule compute_only(const Schedule& s);

}  // namespace stagecraft::schedules
