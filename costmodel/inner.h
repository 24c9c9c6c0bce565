// Costs of the inner (layer-level) schedule of a stage action under tensor parallelism
// (schedules/tp_overlap.h): the duration of every piece, and the two-stream evaluation that
// turns an inner schedule into the action's duration for the cost table. The simulator builds
// the same pieces as activities and flows; the runtime executes them.
#pragma once

#include <vector>

#include "schedules/tp_overlap.h"

namespace stagecraft::costmodel {

// Durations of one stage's pieces for one sub-batch (b / sub_batches samples). Blocks of one
// kind (attention, MLP) are alike within a stage.
struct InnerCosts {
  schedules::TpOverlap mode = schedules::TpOverlap::Blocking;
  int sub_batches = 1;      // 1 blocking (or tp = 1), 2 otherwise
  int layers = 0;           // transformer layers of the stage (0: no inner schedule, unit costs)
  bool embedding = false;   // the stage starts the model
  bool head = false;        // the stage ends it
  double attn_f_s = 0;      // forward of one attention block (QKV, core, output projection)
  double mlp_f_s = 0;       // forward of one MLP block
  double attn_i_s = 0;      // input gradient of one attention block (+ the selective recompute of its core)
  double mlp_i_s = 0;
  double attn_w_s = 0;      // weight gradient of one attention block
  double mlp_w_s = 0;
  double attn_r_s = 0;      // recomputation of one attention block (its forward again)
  double mlp_r_s = 0;
  double embed_f_s = 0, embed_b_s = 0;                // embedding forward, backward
  double head_f_s = 0, head_i_s = 0, head_w_s = 0;    // LM head and loss
  double comm_s = 0;        // one tp collective of one sub-batch: all-reduce of (b/sb, s, h), or
                            // with sequence parallelism a reduce-scatter plus an all-gather
  double comm_bytes = 0;    // its buffer: (b/sb, s, h) elements
  int comm_chunks = 1;      // te: chunks each collective is pipelined in (the tp degree)
  double comm_sm_slowdown = 0;  // te: compute time added per second of collective beside it, for
                                // the SMs the communication kernels take: k / (SMs - k) with k the
                                // stack's tp_overlap_comm_sms
};

// Duration of one piece of a stage action `op` (F, B, I, W or R).
double piece_duration(const schedules::Piece& p, schedules::Op op, const InnerCosts& c);

struct InnerResult {
  double time_s = 0;          // end of the last piece on either stream
  double compute_s = 0;       // sum of compute pieces
  double comm_s = 0;          // sum of collectives
  double exposed_comm_s = 0;  // time_s - compute_s: what overlap did not hide
  std::vector<double> start_s, end_s;  // per piece
};

// List scheduling on two streams: each piece starts when its stream has finished the pieces
// issued before it and its dependencies have finished.
InnerResult evaluate_inner(const schedules::InnerSchedule& s, const InnerCosts& c);
// The same with explicit durations (one per piece), for unit-cost studies.
InnerResult evaluate_inner(const schedules::InnerSchedule& s, const std::vector<double>& durations);

// The stage action's inner schedule for these costs (`recompute_layers` for a joint R + B).
// The inner schedule of one action of a stage with these costs' shape (mode, layers, ends,
// collectives, chunks). Built once per shape for the process (a planner prices thousands of
// stages of a few shapes) and shared read-only, so the reference stays valid.
const schedules::InnerSchedule& inner_schedule_for(const InnerCosts& c, schedules::Op op, int recompute_layers = 0);

// Durations for the cost table: f, b, i, w, r of one microbatch (all sub-batches). r is the
// full recomputation of the stage; in the modes that join it to the backward (every mode that
// splits: merak layer by layer with barriers, cross-pass and oases freely) it is what joining
// it adds: T(R + B) - T(B).
struct InnerDurations {
  double f_s = 0, b_s = 0, i_s = 0, w_s = 0, r_s = 0;
  double exposed_comm_f_s = 0, exposed_comm_b_s = 0;  // collective time not hidden in F, in B
};
InnerDurations inner_durations(const InnerCosts& c);

}  // namespace stagecraft::costmodel
