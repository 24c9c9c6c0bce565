// Helpers shared by the simulator's tests: a plan from its degrees, and the options that fold
// tensor-parallel all-reduces into compute as the evaluator counts them.
#pragma once

#include "costmodel/specs.h"
#include "sim/simulate.h"

namespace stagecraft::test {

inline costmodel::ParallelPlan plan_of(int dp, int tp, int pp, int microbatches) {
  costmodel::ParallelPlan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.num_microbatches = microbatches;
  return p;
}

inline sim::SimOptions folded_tp() {
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Folded;
  return o;
}

}  // namespace stagecraft::test
