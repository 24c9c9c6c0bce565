// Collective profiling: point-to-point, all-reduce, all-gather and reduce-scatter time against
// message size among the local ranks over the runtime's backend (Gloo here), medians of
// repeated runs, and a table in the style of nccl-tests (size, time, algorithm bandwidth, bus
// bandwidth). Torch-free interface; runs inside ranks started by runtime::launch_local.
#pragma once

#include <string>
#include <vector>

#include "costmodel/profile.h"
#include "runtime/train.h"

namespace stagecraft::profiler {

struct CollectiveOptions {
  long min_bytes = 4096;       // smallest message
  long max_bytes = 4L << 20;   // largest message (sizes go up by 4x)
  int warmup = 2;              // untimed repetitions per size
  int runs = 9;                // timed repetitions per size; the median is kept
  double timeout_s = 60;       // a silent peer fails the measurement after this
  std::string backend = "gloo";  // gloo (CPU tensors, host clock), nccl (each rank's GPU,
                                 // device events; one GPU per rank) or store (runtime/store_comm.h)
};

// Measured on every rank of `env` (world >= 2); rank 0 returns the rows, others an empty list.
std::vector<costmodel::CollectiveProfile> profile_collectives(const runtime::RankEnv& env, const CollectiveOptions& opt);

// nccl-tests-style table of the rows.
std::string collectives_table(const std::vector<costmodel::CollectiveProfile>& rows);

}  // namespace stagecraft::profiler
