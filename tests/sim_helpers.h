// Helpers shared by the simulator's tests (plan_of is in helpers.h): the options that fold
// tensor-parallel all-reduces into compute as the evaluator counts them.
#pragma once

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "costmodel/specs.h"
#include "helpers.h"  // plan_of
#include "sim/simulate.h"

namespace stagecraft::test {

// A cluster with `preset`'s links and GPUs: `nodes` nodes of gpus_per_node GPUs and
// nics_per_node NICs each.
inline costmodel::ClusterSpec shaped(const std::string& preset, int nodes, int gpus_per_node, int nics_per_node) {
  costmodel::ClusterSpec c = presets::load_cluster(preset);
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.nics_per_node = nics_per_node;
  return c;
}

// An H100 cluster (h100-ib-1024's links) of gpus_per_node GPUs and nics_per_node NICs per
// node, as many nodes as `gpus` needs.
inline costmodel::ClusterSpec h100_shaped(int gpus_per_node, int nics_per_node, int gpus) {
  return shaped("h100-ib-1024", (gpus + gpus_per_node - 1) / gpus_per_node, gpus_per_node, nics_per_node);
}

inline sim::SimOptions folded_tp() {
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Folded;
  return o;
}

// Simulates estimate `e` as planned (its schedule, cost table, cluster and plan) with
// tensor-parallel collectives as `tp_comm` says; `record` keeps the flows (SimResult::net_spans).
inline sim::SimResult simulate_estimate(const costmodel::Estimate& e, sim::TpComm tp_comm, bool record = false) {
  sim::SimOptions o;
  o.tp_comm = tp_comm;
  o.record = record;
  return sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
}

}  // namespace stagecraft::test
