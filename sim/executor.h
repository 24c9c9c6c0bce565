// Runs a lowered schedule on a SimGrid platform as one dependency graph of activities: no
// actors at all. Each compute action is an Exec on its GPU host (one per piece of its inner
// schedule with a tp overlap mode: compute.cpp), each transfer, ring step and
// copy a Comm between hosts; edges encode the IR's semantics (docs/ir.md, docs/sim.md). The
// graph is kept here (records and edges), and a SimGrid activity is created only when its
// predecessors have finished: SimGrid 3.32 keeps every created activity in a list that each
// completion scans, so creating the whole graph up front costs O(activities^2).
// Internal to sim/.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "costmodel/costs.h"
#include "costmodel/topology.h"
#include "schedules/schedule.h"
#include "sim/platform.h"
#include "sim/simulate.h"
#include "sim/workload.h"

namespace stagecraft::sim {

enum class RecKind : std::uint8_t {
  Compute,  // a whole compute action (zero length: an R that runs inside its backward)
  TpPad,    // the step latencies of explicit tensor-parallel ring all-reduces after their flows
  Flow,     // a transfer, ring step or copy
  Piece,    // a compute piece of an action's inner schedule (schedules/tp_overlap.h)
  TpEnd,    // zero-length end of an inner schedule: after its last compute piece and collective
  Inner,    // an action's inner schedules as one exec where its tp group's links carry nothing
            // else (Runner::inner_block); after the run its pieces, flows and pads are recorded
            // as the full simulation would have run them, and metrics read those
};

struct Record {                // one simulated activity
  std::int32_t unit = 0;       // issuing unit: pipeline rank * dp + data-parallel index
  std::int32_t peer_unit = 0;  // receiving unit (pipeline transfers), else unit
  std::int32_t iteration = 0;
  std::int32_t position = 0;   // in the pipeline rank's action list
  std::int32_t src_gpu = 0;    // exec: its host; flow: source GPU (-1 = host memory)
  std::int32_t dst_gpu = 0;    // flow: destination GPU (-1 = host memory)
  RecKind kind = RecKind::Compute;
  CommKind comm = CommKind::Pipeline;  // flows only
  std::int32_t lanes = 1;      // flows: GPU flows this one stands for (tp lanes aggregated)
  double bytes = 0;            // flows only: bytes of the whole (aggregated) flow
  double work = 0;             // what SimGrid runs: flops (exec) or bytes (flow)
  simgrid::s4u::Host* from = nullptr;  // exec: its host; flow: source host
  simgrid::s4u::Host* to = nullptr;    // flow: destination host
  double start_s = -1, end_s = -1;  // -1 until it ran
};

struct Execution {
  std::vector<Record> records;  // every activity, in creation order
  int dp = 1, tp = 1;           // units are (pipeline rank, dp index); each drives tp GPUs
  long engine_activities = 0;   // records the engine ran (the rest: collapsed inner schedules' pieces)
  double graph_s = 0;           // wall time building the activity graph
  double engine_s = 0;          // wall time of the engine's run (and the expansion after it)
};

// Strides of the data-parallel sub-groups that reduce apart from the whole group: ep (the routed
// experts' gradients, plan.ep > 1) and the shard group (hybrid sharding's copies).
std::vector<int> reduction_strides(const costmodel::ParallelPlan& p);

// GPU pairs that exchange data (pipeline neighbours, dp rings, tp rings when explicit).
std::vector<std::pair<int, int>> needed_pairs(const schedules::Schedule& s, const costmodel::ParallelPlan& p,
                                              const costmodel::Topology& topo, const Workload& w, const SimOptions& opt);

// Members of a dp group (their GPUs, in ring order) grouped by node, when the group spans
// several nodes with the same number L >= 1 of members on each; else empty (flat ring).
std::vector<std::vector<int>> node_groups(const std::vector<int>& gpus, const costmodel::Topology& topo);

// A what-if on the simulated units (sim/whatif.h): a unit is a tensor-parallel group, whose
// kernels end together at its collectives, so it computes at its slowest GPU's rate and starts
// when its latest GPU does.
struct UnitEffects {
  std::vector<double> rate;         // (units) compute rate factor; empty = 1 everywhere
  std::vector<double> delay_s;      // (units) wait before the unit's first action; empty = none
  std::vector<std::uint64_t> stream;  // (units) jitter stream: the plan's first GPU of the unit
  Jitter jitter;                    // per-kernel draws: one multiplier per compute action
  bool perturbs_compute() const;    // some rate differs from 1, or jitter with cv > 0
};

// Builds the graph, runs the engine, and returns the records. `p` holds the replicas simulated
// (p.dp of them) of the whole plan's `dp_whole` (sim/symmetry.h): every data-parallel collective
// is priced for its whole group. Throws InputError when the schedule deadlocks (which ranks wait
// on what) or a receive has no matching send.
Execution execute(const schedules::Schedule& s, const costmodel::CostTable& c, const Workload& w,
                  const costmodel::ParallelPlan& p, int dp_whole, const costmodel::Topology& topo, const Platform& pf,
                  const SimOptions& opt, const UnitEffects& fx = {});

}  // namespace stagecraft::sim
