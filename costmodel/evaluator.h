// The fast evaluator: the timeline of a lowered schedule under a cost table, with no network
// contention (every transfer gets its link to itself; the simulator models sharing).
//
// Semantics (docs/evaluator.md): each rank runs its actions in order on a compute stream;
// SEND, RECV, REDUCE_GRAD, OFFLOAD and RELOAD take no compute-stream time. A transfer starts
// when both its SEND and its RECV have been posted (rendezvous) and takes the stage's
// send time. A compute action on (stage, microbatch) waits for every receive and reload of
// that (stage, microbatch) posted before it in the list. REDUCE_GRAD runs on the rank's
// communication stream, OFFLOAD/RELOAD on its copy stream, each in issue order; OPTIMIZER
// waits for the rank's reductions. Several iterations run back to back; the last is reported.
//
// Construction compiles the schedule into a dependency graph in topological order (and finds
// deadlocks); evaluate() then costs it in one pass, cheap enough for planners.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/costs.h"
#include "schedules/memory_events.h"
#include "schedules/schedule.h"

namespace stagecraft::costmodel {

struct EvalOptions {
  int iterations = 3;   // iterations run back to back; the last one is reported (steady state)
  bool memory = true;   // per-rank peak memory from the timeline
  bool record = false;  // keep every node's start and end (for traces)
};

enum class Stream : std::uint8_t { Compute = 0, P2P = 1, Collective = 2, Copy = 3 };

struct Span {          // one executed piece of work, for traces
  int rank = 0;
  Stream stream = Stream::Compute;
  int iteration = 0;
  int position = 0;    // index in the rank's action list
  double start_s = 0, end_s = 0;
};

struct EvalResult {
  double iteration_time_s = 0;      // steady-state: end of the last iteration minus the one before
  std::vector<double> compute_s;    // (ranks) busy time of the compute stream in one iteration
  std::vector<double> idle_s;       // (ranks) iteration_time_s - compute_s
  double bubble_over_compute = 0;   // (T - C) / C, C the busiest rank's compute (as Merak and Megatron-LM report it)
  double bubble_fraction = 0;       // (T - C) / T
  double mean_idle_fraction = 0;    // mean over ranks of idle_s / T
  std::vector<double> peak_activations;       // (ranks) microbatches held at the peak, weighted by
                                              // stage size: 1 = one microbatch through L/p layers
  std::vector<double> peak_activation_bytes;  // (ranks) on the GPU, from the timeline: activations
                                              // plus the working set of a backward in progress
  std::vector<double> peak_memory_bytes;      // (ranks) static + peak activations
  std::vector<double> peak_host_bytes;        // (ranks) offloaded activations at the peak
  std::vector<std::vector<std::pair<double, double>>> memory_timeline;  // (ranks) (time_s, bytes): the
                                              // rank's static bytes plus its activations after each change
                                              // in the last iteration; only with EvalOptions::record
  std::vector<double> dp_comm_s;    // (ranks) busy time of the communication stream
  std::vector<double> exposed_dp_comm_s;  // (ranks) communication-stream time not under compute
  std::vector<Span> spans;          // every node when EvalOptions::record
};

class Evaluator {
 public:
  // Compiles the schedule. Throws ScheduleError (with the marked grid) when it deadlocks.
  explicit Evaluator(const schedules::Schedule& lowered, EvalOptions opt = {});
  EvalResult evaluate(const CostTable& costs) const;

  const schedules::Schedule& schedule() const { return schedule_; }
  const EvalOptions& options() const { return opt_; }
  size_t num_nodes() const { return nodes_.size(); }

 private:
  // kOB, kOI: the backward half of an OVERLAP_F_B (StageCost::overlap_b_s, overlap_i_s).
  enum Slot : std::uint8_t { kF, kB, kI, kW, kR, kSendF, kSendB, kReduce, kReduceLatency, kOffload, kReload, kOB, kOI, kSlotsPerStage };
  struct Node {
    std::uint32_t pred_begin = 0;  // into preds_
    std::uint32_t pred_end = 0;
    std::int32_t slot_a = -1;      // cost slot (stage * kSlotsPerStage + Slot), -1 = none
    std::int32_t slot_b = -1;      // second slot (OVERLAP_F_B's backward)
    double factor_a = 1;           // fraction applied to slot_a (R, REDUCE_GRAD)
    std::int32_t rank = 0;
    std::int32_t position = 0;     // in the rank's action list
    std::int32_t iteration = 0;
    Stream stream = Stream::Compute;
    bool is_compute = false;       // counts as compute time (F, B, I, W, R, OVERLAP, OPTIMIZER)
    bool optimizer = false;        // slot is the rank's optimizer step
    bool copy = false;             // OFFLOAD/RELOAD: duration scales with what the forward kept
    double kept_fraction = 0;      // copy nodes: recompute share f of the (stage, microbatch)
    double early = 0;              // a bucket's issue: starts this share of its one predecessor
                                   // (the backward) before that ends (schedules/buckets.h)
    std::int32_t head_slot = -1;   // the first bucket of a parameter all-gather: ends at its one
                                   // predecessor's (the gather's) start plus this slot's share of
                                   // its duration (1 unless the gather overlaps the next forward)
  };
  schedules::Schedule schedule_;
  EvalOptions opt_;
  std::vector<Node> nodes_;              // topological order
  std::vector<std::uint32_t> preds_;

  // Memory for the last iteration, per rank: its events (schedules/memory_events.h) on each
  // stream in list order, and the node that times each one.
  std::vector<std::vector<schedules::MemoryEvent>> mem_compute_, mem_copy_;  // (ranks)
  std::vector<std::vector<std::uint32_t>> mem_compute_node_, mem_copy_node_;   // (ranks)
  std::vector<std::vector<schedules::MemoryEvent>> mem_all_;  // (ranks) every event, list order
  std::vector<std::vector<std::uint32_t>> compute_last_;  // (ranks) compute nodes of the last iteration, in list order
  std::vector<std::vector<std::uint32_t>> coll_last_;     // (ranks) collective nodes of the last iteration, in order (reductions, parameter gathers)

  struct Build;  // compile()'s working state and passes (evaluator_compile.cpp)
  void compile();
  void record_last_iteration(const Build& b);
  std::vector<double> flatten_slots(const CostTable& c) const;
  void run_timeline(const std::vector<double>& slot, const CostTable& c, std::vector<double>& start, std::vector<double>& end,
                    std::vector<double>& iter_end) const;
  void measure_streams(EvalResult& res, const std::vector<double>& start, const std::vector<double>& end) const;
  void measure_memory(EvalResult& res, const CostTable& c, const std::vector<double>& start, const std::vector<double>& end) const;
  void record_spans(EvalResult& res, const std::vector<double>& start, const std::vector<double>& end) const;
};

}  // namespace stagecraft::costmodel
