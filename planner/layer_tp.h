// Oases' planner (Sec. V): a tensor-parallel degree per transformer layer, chosen by an integer
// linear program over the layers' costs under the overlapped schedule, the resharding between
// layers of different degrees, and the GPU's memory.
//
// A layer at degree d inside a tensor-parallel group of T GPUs runs as T/d replicas of d GPUs,
// each on b d / T of the microbatch's b samples: the batch dimension takes what tp does not
// (Oases builds its strategies on Alpa's, Sec. V-A). Per GPU the FLOPs stay the same, the
// collectives run over d GPUs on a smaller buffer, the weights take T/d times the memory and the
// gradients are reduced over dp * T/d replicas. Between a layer of degree i and the next of
// degree j != i the activations are all-gathered over the batch: in the forward when i < j, in
// the backward when i > j (eq. (4)).
//
// Nodes of eq. (3) are blocks (a computation sequence and the collective after it): a layer's
// attention and its MLP. The objective per iteration is
//   m * (T_V(F) + T_V(B) + sum of edge costs (4))           eq. (5), m microbatches
//   + the exposed gradient reduction of the layers            (not in eq. (5): with replicas the
//   + the layers' optimizer step                                gradients grow; see below)
// and the memory constraint is eq. (6) with m_s the layer's weights, gradients and optimizer
// states, m_t what it keeps for the backward, m_r the one layer rebuilt at a time, plus what does
// not depend on the degrees (embedding, head, buffers), taken from the evaluator's peak of the
// uniform plan so that the uniform point's memory equals `estimate`'s.
//
// The durations come from the cost model (costmodel::analytic_cost_table at each degree: the
// shape-aware compute, the collectives on the group's links, a profile where given). Oases runs
// without pipelining (Sec. VI-A, "we disable the PMP"); so does this planner: pp = 1.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {
struct Profile;
}

namespace stagecraft::planner {

// The costs of one transformer layer at one tensor-parallel degree (one strategy of eq. (2)).
struct DegreeCosts {
  int degree = 1;              // GPUs the layer's weights split over (divides plan.tp)
  int samples = 0;             // b d / T: samples of the microbatch one replica runs
  int sub_batches = 1;         // 2 when they split in two for the overlap, else 1 (nothing hides)
  double fwd_s[2] = {0, 0};    // d(F) of the attention, MLP block for one sub-batch
  double bwd_s[2] = {0, 0};    // d(B): input and weight gradients, plus the recomputation
  double comm_s = 0;           // c: one collective of one sub-batch (each block ends with one)
  double grad_reduce_s = 0;    // data-parallel reduction of the layer's gradients (dp * T/d ranks)
  double optimizer_s = 0;      // optimizer step of the layer's parameters on one GPU
  double static_bytes = 0;     // m_s: weights, gradients, optimizer states on one GPU
  double saved_bytes = 0;      // m_t: kept from the forward for the backward, per microbatch in flight
  double temp_bytes = 0;       // m_r: the layer's activations while it is recomputed
};

struct LayerTpProblem {
  int layers = 0;                        // transformer layers, each choosing one option
  int microbatches = 1;                  // m: forward and backward passes per iteration
  int tp = 1;                            // T, the plan's tensor-parallel group
  bool overlapped = false;               // two sub-batches overlap collectives (eq. (3)); else sums
  bool overlap_grad_reduce = false;      // the gradient reduction hides behind the last backward
  std::vector<DegreeCosts> options;      // (p) the candidate degrees, ascending
  std::vector<std::vector<double>> allgather_s;  // (p, p) T_AG of a reshard between options i, j
  double fixed_bytes = 0;                // memory that no degree changes
  double memory_bytes = 0;               // m of eq. (6): the GPU's usable memory (memory_margin off)
};

// The problem for plan `p` (pp = 1, tp > 1) of model `m` on cluster `c`: every power-of-two
// degree d dividing tp and the heads with b d / T whole. Throws InputError naming the field
// when the plan is outside what Oases' formulation covers.
LayerTpProblem layer_tp_problem(const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
                                const costmodel::ParallelPlan& p, const costmodel::Profile* profile = nullptr);

// The value of a choice (one option index per layer).
struct LayerTpBreakdown {
  double time_s = 0;          // the objective: the layers' part of one iteration
  double reshard_s = 0;       // edge costs (4) over the iteration
  double tp_comm_s = 0;       // every collective of the layers over the iteration (hidden or not)
  double grad_exposed_s = 0;  // gradient reduction not hidden behind the backward
  double memory_bytes = 0;    // left side of (6)
  bool fits = false;          // memory_bytes <= the GPU's usable memory
};
LayerTpBreakdown evaluate_layer_tp(const LayerTpProblem& pr, const std::vector<int>& choice);

struct LayerTpSolution {
  std::vector<int> degrees;   // (layers) the chosen degree of each layer; empty when none fits
  LayerTpBreakdown value;
  double solve_s = 0;         // wall time of the solver
  int variables = 0, rows = 0;  // size of the ILP (0 for the exhaustive search)
};
// Eqs. (3)-(6) as an ILP solved with CBC: one-hot choice per layer, the max of (3) and the
// products of (5) linearised with auxiliary variables.
LayerTpSolution solve_layer_tp(const LayerTpProblem& pr);
// Every choice, for tests on small problems (p^layers evaluations).
LayerTpSolution solve_layer_tp_exhaustive(const LayerTpProblem& pr);

// "[[2]x10+[4]x6]": runs of equal degrees, in Oases Table II's notation.
std::string format_degrees(const std::vector<int>& degrees);

}  // namespace stagecraft::planner
