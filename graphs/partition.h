// Pipeline stages from a subgraph sequence (graphs/shard.h): contiguous runs balanced by the
// planner's stage balancing (planner/balance.h), as Merak follows AutoPipe (Merak Sec. 4.2),
// with what each stage computes, holds and sends.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "graphs/shard.h"

namespace stagecraft::graphs {

struct PartitionOptions {
  int stages = 1;                          // P, pipeline stages
  const costmodel::ClusterSpec* cluster = nullptr;  // prices FLOPs as time; null: balance FLOPs
  bool full_recompute = false;             // the backward repeats the forward (adds it to the work)
  double static_bytes_per_param_byte = 8;  // weights, gradients and Adam states per byte of 16-bit
                                           // weight: 16 bytes per parameter (costmodel/memory.h)
  std::vector<double> subgraph_s;          // each subgraph's seconds as the estimate prices them
                                           // (graphs/estimate.h); empty: FLOPs at the cluster's rate
};

struct StagePart {
  int first = 0, count = 0;     // subgraphs [first, first + count)
  double flops = 0;             // forward and backward (and recomputation) of one microbatch
  double time_s = 0;            // seconds of one microbatch (Partition::by_time), else 0
  double param_bytes = 0;       // the stage's weights (tied copies included)
  double static_bytes = 0;      // weights, gradients and optimizer states
  double act_bytes = 0;         // what one microbatch's forward keeps (no recomputation)
  double send_bytes = 0;        // what one microbatch sends to the next stage (0 on the last)
};

struct Partition {
  std::vector<StagePart> stages;
  double bottleneck = 0;        // the largest stage's time (or FLOPs when not by_time)
  bool by_time = false;         // balanced and priced in seconds: with a cluster (measured nodes
                                // by their times, the rest at its rate), or without one when every
                                // operator carries measured times; else by FLOPs
};

// Balances the sharding into opt.stages stages, or cuts it into `counts` subgraphs per stage
// when given (plan.stage_layers, counted in subgraphs). Throws InputError when there are fewer
// subgraphs than stages or the counts do not add up.
Partition partition(const Sharding& sh, const PartitionOptions& opt, const std::vector<int>& counts = {});

}  // namespace stagecraft::graphs
