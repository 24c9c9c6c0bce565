// A greedy list scheduler that builds compute-only schedules from a placement and unit
// durations, the way the zero-bubble paper builds ZB-H1/H2 (Qi et al., ICLR 2024, Sec. 3) and
// the way Chimera's and Hanayo's figures fill each device with the earliest work it can do.
//
// It simulates time: repeatedly, among all ranks, the action that can start earliest runs
// next (ties: backward input > forward > weight backward, then older microbatch, then lower
// rank). A rank admits a new microbatch (its first forward on that rank) only while fewer
// than `max_in_flight` microbatches of that chain are present on it; a microbatch leaves a
// rank when all its stages there have freed their activations (B, or W when split).
// Forwards and backwards of one stage run in microbatch order.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

struct GreedyOptions {
  std::string name;                     // schedule name to give the result
  int ranks = 0;                        // p
  int microbatches = 0;                 // m
  int num_stages = 0;                   // all stages over all chains
  int num_chains = 1;                   // independent pipelines (Chimera: 2)
  PlacementKind placement = PlacementKind::Loop;
  std::vector<int> stage_to_rank;       // (num_stages)
  std::vector<int> chain_of_microbatch; // (m) chain each microbatch runs through; empty = all chain 0
  bool split_backward = false;          // emit I and W (zero bubble) instead of B
  double f_s = 1, b_s = 2, i_s = 1, w_s = 1;  // durations used to order the work
  double comm_s = 0;                    // transfer time between ranks, used to order
  std::vector<int> max_in_flight;       // (ranks) microbatches per chain present at once; <= 0 = unlimited
  std::vector<int> max_live_stages;     // (ranks) stage activations held at once (forward run, backward not yet); empty = no limit
  // Orders actions that could start at the same time, before the rules above (lower first);
  // unset = the rules alone. Arguments: op (F, B, I or W), stage, microbatch.
  std::function<double(Op, int, int)> priority;
};

// Start times of the actions the scheduler placed, in the units of f_s, b_s, i_s and w_s.
struct GreedyTimes {
  std::vector<double> f_start, b_start, w_start;  // (stage * m + mb) forward, backward (or I), weight
  double makespan = 0;                            // end of the last action
  double at(Op op, int stage, int mb, int m) const;
};

// Builds and returns the compute-only schedule; throws Error if the simulation stalls (a bug
// or an impossible limit), naming the ranks and what they wait for.
// With `times`, also returns when each action starts.
Schedule greedy_schedule(const GreedyOptions& opt, GreedyTimes* times = nullptr);

}  // namespace stagecraft::schedules
