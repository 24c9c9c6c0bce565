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

// Mixtral 8x7B cut to 4 layers of 1,024 tokens: an MoE model the simulator runs in milliseconds.
inline costmodel::ModelSpec small_mixtral() {
  costmodel::ModelSpec m = presets::load_model("mixtral-8x7b");
  m.num_layers = 4;
  m.seq_length = 1024;
  return m;
}

// An MoE plan of `dp` x tp 2 x `pp` with every dp rank an expert rank (ep = dp), sequence
// parallel as experts under tp need, 4 microbatches.
inline costmodel::ParallelPlan moe_plan(int dp, int pp) {
  costmodel::ParallelPlan p = plan_of(dp, 2, pp, 4);
  p.ep = dp;
  p.sequence_parallel = true;
  return p;
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
