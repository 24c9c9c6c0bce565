// FOLD3D's closed-form performance model (Li et al., FOLD3D, TPDS 2023, Sec. III-C, eqs. (1)-(7))
// and its segment-number rule (Sec. IV), as a cross-check of the evaluator: the same plan priced
// by the paper's formulas from the cost table's compute and the cluster's network figures.
//
// Eq. (4) as printed subtracts T^comp from the overlappable communication X = (ms-1)/ms T_pp +
// (ns-1)/ns T_dp; put into eq. (2)'s max(T^comp, T_ol) that would count X only beyond 2 T^comp.
// Read together, the two equations say that X hides under the computation and only its excess
// over T^comp reaches the critical path: T = max(T^comp, X) + T_nol + T_bubble. That is what
// iteration_s computes; unhidden_s is eq. (4) as printed, clamped at 0.
#pragma once

#include "costmodel/estimate.h"

namespace stagecraft::costmodel::fold3d {

// Eq. (3): T_bubble = (p-1) T^comp / (ns ms): p-1 forwards and backwards of one segment's
// microbatch.
double bubble_s(double comp_s, int p, int ns, int ms);
// T_dp = 2 (d_inter - 1) w / (d_inter r): ring all-reduce of the w bytes of gradients a host
// holds over the d_inter hosts of a data-parallel group, r the host's network bandwidth.
double dp_comm_s(double host_grad_bytes, int d_inter, double host_Bps);
// T_pp = bs a / (d_inter r): bs transfers of a-byte activations or gradients by one stage.
double pp_comm_s(int transfers, double message_bytes, int d_inter, double host_Bps);
// X of eq. (4): the pipeline transfers but the first microbatch's and the reductions of every
// segment but the first, which other segments' compute can hide.
double overlappable_comm_s(double pp_s, double dp_s, int ns, int ms);
// Eq. (5): T_nol = T_pp/ms + T_dp/ns + T_tp, on the critical path whatever the overlap.
double exposed_comm_s(double pp_s, double dp_s, double tp_s, int ns, int ms);
// Eq. (2) with eq. (4) read as above: max(T^comp, X) + T_nol + T_bubble.
double iteration_s(double comp_s, double tp_s, double pp_s, double dp_s, int p, int ns, int ms);
// Eq. (1), the model of Megatron, Alpa and Piper: T^comp + T^comm + T_bubble, nothing
// overlapped, the bubble of eq. (3) with one segment (1F1B).
double conventional_iteration_s(double comp_s, double tp_s, double pp_s, double dp_s, int p, int ms);
// Eq. (6): checkpoints Megatron's interleaved 1F1B stashes at its peak, (p (ns+1) - 1).
double megatron_checkpoints(int p, int ns);
// Eq. (7): checkpoints AIAO stashes at its peak, ms ns (all forwards before the backwards).
double aiao_checkpoints(int ms, int ns);

// The inputs of the closed forms for one plan, from its estimate, and the results.
struct Model {
  int p = 0, ns = 0, ms = 0;    // pipeline stages, segments, microbatches
  int d_inter = 1;              // hosts of one data-parallel group
  int rank = 0;                 // the pipeline rank priced: the busiest one
  double comp_s = 0;            // T^comp: the rank's compute (recomputation included), less T_tp
  double tp_comm_s = 0;         // T_tp: tensor-parallel collectives its compute does not hide
  double host_grad_bytes = 0;   // w: gradient bytes of every GPU of the fullest host
  double host_Bps = 0;          // r: the host's network bandwidth, all its NICs at bus efficiency
  double message_bytes = 0;     // a: one boundary activation, (b, s, h) or (b, s/t, h) with sp
  int transfers = 0;            // bs = 2 ms ns: a forward and a backward transfer per microbatch
                                // and segment
  double dp_comm_s = 0;         // T_dp
  double pp_comm_s = 0;         // T_pp
  double bubble_s = 0;          // eq. (3)
  double overlappable_s = 0;    // X of eq. (4)
  double unhidden_s = 0;        // eq. (4) as printed: max(0, X - T^comp)
  double exposed_s = 0;         // eq. (5)
  double iteration_s = 0;       // eq. (2)
  double megatron_iteration_s = 0;  // eq. (1) for the same plan run as 1F1B
  double optimizer_s = 0;       // the rank's optimizer step: outside the paper's model, add it to
                                // compare with an iteration of the evaluator
};
// The closed forms for the plan of `e` (any schedule; ns = its `segments` parameter, else 1).
Model model_of(const Estimate& e);
// FOLD3D Sec. IV: "increases ns until the combination of PP.sync and DP.sync tasks exceed the
// computation time being overlapped": the largest ns (from 1, at most max_ns) whose overlappable
// communication X (eq. (4)) stays within T^comp.
// The inputs other than ns (T^comp, T_dp, a, d_inter, r, ms) come from `m`, a model at any ns.
int paper_segments(const Model& m, int max_ns);
// Every field, units in the names, and the rule's pick.
nlohmann::json to_json(const Model& m, int paper_ns);

}  // namespace stagecraft::costmodel::fold3d
