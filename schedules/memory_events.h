// What each action of the schedule IR does to its rank's memory: one statement of the rule for
// every engine. The evaluator (costmodel/evaluator.h) and the simulator (sim/metrics.cpp) time
// these events on their own timelines and price them with one ledger
// (costmodel/memory_walk.h); the runtime allocates for real and is checked against them.
//
// Per action (docs/evaluator.md, "Memory"):
//   F             stores what its forward keeps (all of it, or the checkpoints of the share a
//                 later R recomputes), at its start
//   R             restores what it recomputes, at its start: all of it where it runs apart from
//                 its backward, one layer's worth where it is fused with it (Megatron-LM
//                 recomputes inside the backward one layer at a time; Korthikanti et al., MLSys
//                 2023, Sec. 5)
//   B, I          hold the backward's working set from start to end; at the end B frees what
//                 the pair held, I what only the input gradient read
//   W             frees the rest at its end
//   OVERLAP_F_B   its forward's store and its backward's working set and frees, as above; on two
//                 stages (DualPipe's chunks, interleaved 1F1B's) the store from the pair's start,
//                 so both microbatches are held at once (DeepSeek-V3's Table 2 counts PP+1);
//                 on one stage (Megatron-Core's combined 1F1B without a pipeline, a2a_overlap)
//                 the forward keeps layer by layer what the backward frees, from the last layer
//                 down as it goes up: counted at the pair's end, after the backward's frees
//   OFFLOAD       moves the kept bytes to the host at the end of its copy
//   RELOAD        brings them back: on the GPU from its start, off the host at its end
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

enum class MemoryEffect : std::uint8_t {
  StoreForward,      // F: what the forward keeps
  RestoreRecompute,  // R apart from its backward: everything it recomputes
  RestoreLayer,      // R fused with its backward: one layer's worth
  Free,              // B: what the forward kept (and a separate R restored)
  FreeFused,         // B after a fused R: what the forward kept and the layer restored
  FreeInput,         // I: what only the input gradient read
  FreeWeight,        // W: the rest
  OffloadEnd,        // OFFLOAD: the kept bytes leave the GPU for the host
  ReloadStart,       // RELOAD: back on the GPU
  ReloadEnd,         // RELOAD: off the host
  WorkStart,         // B or I: the backward's working set, held while it runs
  WorkEnd,
};

struct MemoryEvent {
  std::int32_t position = 0;  // the action's index in its rank's list
  std::int32_t stage = 0;     // the stage whose bytes move (the backward half's, in an OVERLAP_F_B)
  MemoryEffect effect = MemoryEffect::StoreForward;
  bool at_end = false;        // at the end of the action's work (else at its start)
  bool copy = false;          // on the copy stream (OFFLOAD, RELOAD), else the compute stream
  double fraction = 0;        // the recompute share of the (stage, microbatch); 0 where none
};

// True for the effects that release GPU or host bytes (at equal times they go first).
bool frees(MemoryEffect e);
// The microbatches a rank holds change by this (+1 stored, -1 released), weighted by stage
// size in EvalResult::peak_activations.
int held_change(MemoryEffect e);

// True when the R at list[r_index] runs fused with its backward: the next action on the rank,
// sends aside, is that (stage, microbatch)'s B (alone or in an OVERLAP_F_B).
bool recompute_fused_with_backward(const std::vector<Action>& list, size_t r_index);

// Recomputation is by whole layers (Megatron-LM's --recompute-num-layers, the runtime's): an R
// of fraction f on a stage of `layers` layers recomputes round(f x layers) of them. The one
// statement of the rounding; costmodel::recomputed_layer_share prices with it.
int recomputed_layers(double fraction, int layers);

// Per rank, in list order, the memory events of its actions.
std::vector<std::vector<MemoryEvent>> memory_events(const Schedule& s);

}  // namespace stagecraft::schedules
