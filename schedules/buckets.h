// Bucketed data-parallel reduction (PyTorch DDP, Li et al. VLDB 2020; Megatron-LM's
// --overlap-grad-reduce): a stage's gradients are reduced in buckets, each launched as soon as
// the backward has produced its gradients, while the backward still runs.
#pragma once

#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

// The backward a REDUCE_GRAD at list[pos] can overlap: the index of the last compute action
// before it when that is a backward of the reduction's stage (B, W, or OVERLAP_F_B with it as
// the backward half) and only sends and reductions lie between; -1 otherwise.
int backward_before(const std::vector<Action>& list, int pos);
// backward_before of every REDUCE_GRAD of the list in one pass (-1 elsewhere): a stage's buckets
// stand in a row, and a call for each would walk back over the ones before it.
std::vector<int> backwards_before(const std::vector<Action>& list);
bool reduces_after_backward(const std::vector<Action>& list, int pos);

// FOLD3D's deferred shares (Algorithm 2, line 13): a REDUCE_GRAD before its stage's first compute
// action reduces the previous iteration's gradients of that share, which the previous OPTIMIZER
// left for it. It is launched where it stands and runs beside the compute that follows; the
// stage's first compute action (`deferred_waiter`) waits for it and for the update of those
// parameters (Algorithm 1, line 4: a segment's gradients are applied before its next iteration
// begins). One rule for the evaluator, the simulator and the runtime. True per list position.
std::vector<bool> deferred_reductions(const std::vector<Action>& list);
// The position of the first compute action of `stage` after `pos`; -1 if none.
int deferred_waiter(const std::vector<Action>& list, int pos);

// Splits every REDUCE_GRAD that follows its stage's backward (backward_before >= 0) into
// buckets[stage] REDUCE_GRADs of fraction / buckets each. The backward produces gradients from
// its last layer to its first at an even rate, so bucket j (0-based, in launch order) is ready
// when (j + 1) / n of the backward has run: early = (n - 1 - j) / n of it still to run.
// Reductions elsewhere (FOLD3D's deferred shares) stay whole. buckets has one entry per stage,
// each >= 1; throws InputError otherwise.
Schedule bucket_reductions(const Schedule& s, const std::vector<int>& buckets);

}  // namespace stagecraft::schedules
