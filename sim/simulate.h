// The SimGrid simulator: runs a lowered schedule with a cost table on a simulated cluster
// (built from the ClusterSpec or loaded from a SimGrid XML platform), so that transfers and
// collectives sharing a link slow each other down. Results fill the evaluator's EvalResult
// plus exposed communication per kind and link utilisation (docs/sim.md).
//
// This header has no SimGrid types: SimGrid appears only in sim/*.cpp. SimGrid allows one
// engine per process, so simulate() runs each simulation in a forked child process and reads
// its result back; any number of simulations can run from one program.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "costmodel/costs.h"
#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "costmodel/specs.h"
#include "schedules/schedule.h"
#include "sim/whatif.h"

namespace stagecraft::sim {

enum class TpComm {
  Folded,    // tensor-parallel all-reduces stay inside compute durations (as the evaluator)
  Explicit,  // subtracted from compute and simulated as ring all-reduces over the tp group:
             // one aggregated ring after a blocking action, one per collective of the inner
             // schedule (schedules/tp_overlap.h) with a tp overlap mode
};
TpComm parse_tp_comm(const std::string& s);  // "folded" | "explicit"; throws InputError
std::string_view tp_comm_name(TpComm t);

struct SimOptions {
  int iterations = 3;              // iterations run back to back; the last one is reported
  TpComm tp_comm = TpComm::Explicit;  // how tensor-parallel all-reduces are simulated (explicit:
                                      // fast enough at 1,024 GPUs, docs/benchmarks.md)
  std::string platform_file;       // SimGrid XML platform; empty = built from the ClusterSpec
  bool record = false;             // keep spans and network activity (for traces)
  int fat_tree_leaf_nodes = 8;     // fat-tree: nodes under one leaf switch
  bool aggregate_tp = true;        // one flow per tensor-parallel group where exact (docs/sim.md)
  bool hierarchical_dp = true;     // NCCL-like dp all-reduce (two-level ring or tree) where a dp group spans nodes (docs/sim.md)
  bool inner_blocking = false;     // explicit tp: blocking stages also run their inner schedules
                                   // (a piece per block) instead of one ring after each action;
                                   // the same times, about 10x the activities (docs/sim.md)
  bool symmetry = true;            // simulate one block of data-parallel replicas for all where the
                                   // placement repeats (sim/symmetry.h); false: every replica
  WhatIf whatif;                   // slow GPUs, degraded NICs, late ranks, jitter (sim/whatif.h);
                                   // empty = nominal. whatif.iterations is not read here (iterations
                                   // above is; simulate_whatif sets it)
};

struct LinkUse {
  std::string name;           // SimGrid link name (split-duplex halves end in _UP/_DOWN)
  double bandwidth_Bps = 0;   // its capacity
  double bytes = 0;           // bytes carried in the reported iteration
  double utilisation = 0;     // bytes / (bandwidth * iteration time)
};

enum class CommKind : std::uint8_t { Pipeline = 0, DataParallel = 1, TensorParallel = 2, Copy = 3, ExpertParallel = 4, ContextParallel = 5 };
std::string_view comm_kind_name(CommKind k);

struct NetSpan {              // one simulated flow, for traces
  int src_gpu = 0, dst_gpu = 0;  // global GPU ranks; -1 = host memory
  CommKind kind = CommKind::Pipeline;
  int iteration = 0;
  double bytes = 0;
  double start_s = 0, end_s = 0;
};

struct SimResult {
  costmodel::EvalResult eval;             // per pipeline rank: the worst data-parallel replica;
                                          // eval.exposed_dp_comm_s is data-parallel exposure
  std::vector<double> exposed_pp_comm_s;  // (ranks) pipeline transfers received, not under compute
  std::vector<double> exposed_tp_comm_s;  // (ranks) tensor-parallel all-reduce time on the compute path
  std::vector<double> exposed_ep_comm_s;  // (ranks) expert-parallel all-to-all time on the compute path (flows
                                          // with explicit tp; else folded into compute, as the evaluator)
  LinkUse busiest_link;                   // highest utilisation in the reported iteration
  std::vector<LinkUse> top_links;         // the busiest few, highest first
  std::vector<NetSpan> net_spans;         // last iteration's flows when SimOptions::record
  int num_gpus = 0;                       // GPUs of the plan
  int simulated_gpus = 0;                 // GPUs whose work was simulated (num_gpus / dp_copies)
  int dp_simulated = 1;                   // data-parallel replicas simulated (sim/symmetry.h)
  int dp_copies = 1;                      // replicas each simulated one stands for (1 where a what-if
                                          // makes some blocks differ: then dp_replicas / dp_simulated on average)
  int dp_replicas = 1;                    // the plan's data-parallel replicas (dp x cp)
  std::vector<double> iteration_times_s;  // each iteration's time: the first from 0, then end to end
  std::string symmetry_off_because;       // why every replica was simulated (empty otherwise)
  long activities = 0;                    // executions and flows the engine ran (events)
  double sim_wall_s = 0;                  // wall time of platform building and simulation
  double events_per_s = 0;                // activities / sim_wall_s
  double setup_s = 0;                     // wall time: topology, workload, symmetry and platform
  double graph_s = 0;                     //            the activity graph
  double engine_s = 0;                    //            the engine's run
  double metrics_s = 0;                   //            the metrics from the records
  double peak_rss_bytes = 0;              // peak resident memory of the simulating process
};

// Simulates `lowered` (a lowered schedule for plan.pp ranks) with `costs` on `cluster` with
// plan's dp x tp x pp GPUs. Throws InputError for bad input (platform hosts not matching the
// GPU count, zero-bandwidth links, a schedule that deadlocks: the message says which ranks wait
// on what) and Error for failures at run time.
SimResult simulate(const schedules::Schedule& lowered, const costmodel::CostTable& costs,
                   const costmodel::ClusterSpec& cluster, const costmodel::ParallelPlan& plan,
                   const SimOptions& opt = {});

// The estimate path with the simulator as the engine: simulates e's schedule and cost table and
// returns e with eval and the figures derived from it (throughput, TFLOP/s, MFU, memory, fits)
// replaced by the simulated ones; the full result goes to *out when given.
costmodel::Estimate simulated_estimate(const costmodel::Estimate& e, const SimOptions& opt = {}, SimResult* out = nullptr);
// e with eval and the figures derived from it replaced by r's (as simulated_estimate).
costmodel::Estimate with_simulation(const costmodel::Estimate& e, const SimResult& r);

nlohmann::json to_json(const SimResult& r);
SimResult sim_result_from_json(const nlohmann::json& j);

}  // namespace stagecraft::sim
