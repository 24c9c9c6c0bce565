// Measurements behind bench/bench_runtime.cpp (docs/benchmarks.md, "Runtime"): the
// executor's overhead against a plain LibTorch loop, and Gloo bandwidth between two ranks.
// Torch-free interface.
#pragma once

#include <nlohmann/json.hpp>

#include "costmodel/specs.h"
#include "runtime/train.h"

namespace stagecraft::runtime {

struct OverheadOptions {
  costmodel::ModelSpec model;  // model to train (one stage, one rank)
  int microbatches = 4;        // per iteration
  int microbatch_size = 4;     // samples per microbatch
  int steps = 30;              // measured iterations of each kind (after 3 warm-up ones)
  int threads = 1;             // torch intra-op threads
};
// Median iteration time of the plain loop and of the executor running the lowered one-rank
// GPipe list, interleaved in blocks so drift hits both alike.
nlohmann::json measure_overhead(const OverheadOptions& opt);

// Ping-pong send/recv and all-reduce between the two ranks of `env` (world 2) over Gloo,
// for message sizes from 4 KiB to 16 MiB. Rank 0 returns the table; rank 1 an empty object.
nlohmann::json measure_gloo(const RankEnv& env);

}  // namespace stagecraft::runtime
