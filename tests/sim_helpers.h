// Helpers shared by the simulator's tests (plan_of is in helpers.h): the options that fold
// tensor-parallel all-reduces into compute as the evaluator counts them.
#pragma once

#include "costmodel/specs.h"
#include "helpers.h"  // plan_of
#include "sim/simulate.h"

namespace stagecraft::test {

inline sim::SimOptions folded_tp() {
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Folded;
  return o;
}

}  // namespace stagecraft::test
